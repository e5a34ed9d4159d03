#!/usr/bin/python3
"""Exports the PyTorch 1.13 parity models (random weights, no downloads) to
OUTDIR/<name>/: model.onnx, inputs (<input>.npy, per batch size b<B>/) and
PyTorch's outputs (expected_<output>.npy). Models: mlp (784-512-512-10),
resnet18, mobilenet_v2, transformer (2-layer nn.TransformerEncoder with a
key padding mask, dynamic batch), lstm (2-layer bidirectional nn.LSTM over
batch-first sequences + a linear head, dynamic batch and length), gru_lm (a
GRU language model: nn.Embedding, 2-layer nn.GRU, a linear head over the
vocabulary; int64 tokens), embedding_bag (an nn.EmbeddingBag(mean)
recommender, exported as a Loop over the bags), swin_t (torchvision's
Swin-T: 24 Dropout(ratio=0, training_mode=True) nodes, batch 1). Usage: export_models.py OUTDIR [NAME...]"""
import os
import sys
import warnings

warnings.simplefilter("ignore")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402

torch.manual_seed(0)
np.random.seed(0)


class Transformer(torch.nn.Module):
    def __init__(self, d=64, heads=4, ff=128, layers=2):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, 8)

    def forward(self, x, mask):
        return self.head(self.enc(x, src_key_padding_mask=mask))


class LSTMTagger(torch.nn.Module):
    def __init__(self, d=32, h=48, layers=2):
        super().__init__()
        self.rnn = torch.nn.LSTM(d, h, layers, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(2 * h, 5)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class GRULM(torch.nn.Module):
    def __init__(self, vocab=500, d=64, h=96, layers=2):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.rnn = torch.nn.GRU(d, h, layers, batch_first=True)
        self.head = torch.nn.Linear(h, vocab)

    def forward(self, tokens):
        return self.head(self.rnn(self.emb(tokens))[0])


class BagRecommender(torch.nn.Module):
    def __init__(self, items=300, d=16):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(items, d, mode="mean")
        self.head = torch.nn.Linear(d, 1)

    def forward(self, ids, offsets):
        return torch.sigmoid(self.head(self.bag(ids, offsets)))


def bags(b):
    lens = np.random.randint(1, 7, b)
    ids = np.random.randint(0, 300, int(lens.sum())).astype(np.int64)
    return [ids, np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)]


def build(name):
    if name == "mlp":
        m = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
        return m, ["x"], lambda b: [np.random.randn(b, 784).astype(np.float32)], {"x": {0: "batch"}}, 13, [1, 4]
    if name == "resnet18":
        m = torchvision.models.resnet18(weights=None)
        return m, ["x"], lambda b: [np.random.randn(b, 3, 224, 224).astype(np.float32)], {"x": {0: "batch"}}, 13, [1, 2]
    if name == "mobilenet_v2":
        m = torchvision.models.mobilenet_v2(weights=None)
        return m, ["x"], lambda b: [np.random.randn(b, 3, 224, 224).astype(np.float32)], {"x": {0: "batch"}}, 13, [1, 2]
    if name == "transformer":
        m = Transformer()

        def inputs(b, s=16):
            x = np.random.randn(b, s, 64).astype(np.float32)
            mask = np.zeros((b, s), dtype=bool)
            for i in range(b):
                mask[i, s - (i % 4) * 3:] = True   # pad the tail of some sequences
            return [x, mask]
        return m, ["x", "mask"], inputs, {"x": {0: "batch"}, "mask": {0: "batch"}, "y": {0: "batch"}}, 14, [1, 3]
    if name == "lstm":
        dyn = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
        return LSTMTagger(), ["x"], lambda b: [np.random.randn(b, 7 + b, 32).astype(np.float32)], dyn, 14, [1, 3]
    if name == "gru_lm":
        dyn = {"tokens": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
        return GRULM(), ["tokens"], lambda b: [np.random.randint(0, 500, (b, 9 + b)).astype(np.int64)], dyn, 14, [1, 3]
    if name == "swin_t":
        m = torchvision.models.swin_t(weights=None)
        return m, ["x"], lambda b: [np.random.randn(b, 3, 224, 224).astype(np.float32)], None, 14, [1]
    if name == "embedding_bag":
        dyn = {"ids": {0: "n"}, "offsets": {0: "batch"}, "y": {0: "batch"}}
        return BagRecommender(), ["ids", "offsets"], bags, dyn, 14, [2, 5]
    raise SystemExit("unknown model " + name)


def randomize(m):
    # BatchNorm running stats away from the defaults so that folding is tested
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.5, 0.5)


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or ["mlp", "resnet18", "mobilenet_v2", "transformer", "lstm", "gru_lm", "embedding_bag",
                              "swin_t"]
    for name in names:
        d = os.path.join(out, name)
        if os.path.exists(os.path.join(d, ".done")):
            continue
        os.makedirs(d, exist_ok=True)
        m, in_names, make_inputs, dyn, opset, batches = build(name)
        randomize(m)
        m.eval()
        ex = [torch.from_numpy(a) for a in make_inputs(batches[0])]
        torch.onnx.export(m, tuple(ex), os.path.join(d, "model.onnx"), input_names=in_names, output_names=["y"],
                          dynamic_axes=dyn, opset_version=opset, do_constant_folding=True)
        for b in batches:
            bd = os.path.join(d, "b%d" % b)
            os.makedirs(bd, exist_ok=True)
            arrs = make_inputs(b)
            for n, a in zip(in_names, arrs):
                np.save(os.path.join(bd, n + ".npy"), a)
            with torch.no_grad():
                y = m(*[torch.from_numpy(a) for a in arrs])
            np.save(os.path.join(bd, "expected_y.npy"), y.numpy())
        open(os.path.join(d, ".done"), "w").write("ok\n")


if __name__ == "__main__":
    main()
