"""The reserved token ids every keras_attn tokenizer, model and search shares.

    PAD_ID = 0    padding; also ends a sequence in `detokenize`
    START_ID = 1  decoder start token ("<s>")
    END_ID = 2    end of sequence ("</s>")
    UNK_ID = 3    anything not in the vocabulary ("<unk>")

A module of plain constants: the models import it without TensorFlow (keras_attn.text's
tokenizers, which need TensorFlow, import it too).
"""

PAD_ID = 0
START_ID = 1
END_ID = 2
UNK_ID = 3
RESERVED_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
