"""Models: `from keras_attn.models import HardAttentionModel, ...`."""

from keras_attn.models.captioner import ShowAttendTell
from keras_attn.models.cloze_reader import AttentionOverAttentionReader
from keras_attn.models.common import MaskedSequenceAccuracy, MaskedSequenceLoss, teacher_forcing
from keras_attn.models.convs2s import ConvS2S
from keras_attn.models.han import HierarchicalAttentionNetwork
from keras_attn.models.hard_attention import HardAttentionModel
from keras_attn.models.seq2seq import RNNSeq2Seq
from keras_attn.models.transformer import Transformer
