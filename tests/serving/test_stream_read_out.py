"""How the streaming client reads its search's events out: the last of the steps queued up, a
step that comes within the read-out interval of the last one held back until the interval
ends (so the text of a burst of steps is read out once, and none lags behind), then the end."""

import queue
import threading
import time

from keras_attn.serving.streaming import _latest


def test_a_burst_is_read_out_once_and_a_held_step_when_its_interval_ends():
    events = queue.Queue()
    read = _latest(events, interval=0.2)
    events.put(("step", 1, "a"))
    t0 = time.monotonic()
    assert next(read) == ("step", 1, "a")  # the first step at once
    events.put(("step", 2, "ab"))
    events.put(("step", 3, "abc"))
    assert next(read) == ("step", 3, "abc")  # held back, then the last of them
    assert time.monotonic() - t0 >= 0.2 - 1e-3  # not before the interval ended
    events.put(("step", 4, "abcd"))
    events.put(("done", None, "result"))
    assert next(read) == ("step", 4, "abcd")
    assert next(read) == ("done", None, "result")
    assert next(read, None) is None


def test_the_end_goes_out_at_once_past_a_held_step():
    events = queue.Queue()
    read = _latest(events, interval=60.0)
    events.put(("step", 1, "a"))
    assert next(read) == ("step", 1, "a")
    events.put(("step", 2, "ab"))
    t0 = time.monotonic()
    got = []

    def finish():
        time.sleep(0.05)
        events.put(("done", None, "result"))

    threading.Thread(target=finish).start()
    got.append(next(read))
    assert got == [("done", None, "result")]  # the end's text holds the held step's
    assert time.monotonic() - t0 < 30.0  # the end did not wait out the interval


def test_without_an_interval_every_step_goes_out():
    events = queue.Queue()
    read = _latest(events, interval=0.0)
    for step in (1, 2):
        events.put(("step", step, step))
        assert next(read) == ("step", step, step)
