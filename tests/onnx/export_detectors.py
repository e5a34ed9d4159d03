#!/usr/bin/python3
"""Exports torchvision's detectors with PyTorch 1.13 for the parity test
tests/integration/onnx_detectors.py: ssdlite320_mobilenet_v3_large,
fasterrcnn_mobilenet_v3_large_320_fpn and maskrcnn_resnet50_fpn, seeded
random weights (no downloads), a small input image, score thresholds low
enough that random weights give real detections. Writes OUT/NAME/model.onnx,
x.npy (one image, 3 x H x W) and the PyTorch outputs expected_<output>.npy
(boxes, scores, labels and for Mask R-CNN masks). Usage: export_detectors.py
OUT [NAME...]"""
import os
import sys
import warnings

warnings.filterwarnings("ignore")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision.models import detection as D  # noqa: E402


class Flat(torch.nn.Module):
    """The detector on one image, its first result dict as a tuple."""

    def __init__(self, m, keys):
        super().__init__()
        self.m, self.keys = m, keys

    def forward(self, x):
        r = self.m([x])[0]
        return tuple(r[k] for k in self.keys)


def build(name):
    torch.manual_seed(7)
    if name == "ssdlite":
        m = D.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=4, score_thresh=0.2,
                                            detections_per_img=50)
        return m, ["boxes", "scores", "labels"], (3, 320, 320)
    if name == "fasterrcnn":
        m = D.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=4,
                                                    box_score_thresh=0.2, box_detections_per_img=30)
        return m, ["boxes", "scores", "labels"], (3, 240, 320)
    if name == "maskrcnn":
        m = D.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=3, min_size=160, max_size=200,
                                    box_score_thresh=0.2, box_detections_per_img=10, rpn_pre_nms_top_n_test=200,
                                    rpn_post_nms_top_n_test=100)
        return m, ["boxes", "scores", "labels", "masks"], (3, 160, 192)
    raise SystemExit("unknown detector " + name)


def randomize(m, x):
    # BatchNorm statistics from this image, layer by layer (a pre-hook sets
    # each layer's from its input before it runs: with random weights, fixed
    # random statistics let the activations drift until whole feature maps
    # are flat and anchors tie in score), random affine parameters (folding
    # is tested); the frozen BatchNorm of the R-CNN backbones as well
    g = torch.Generator().manual_seed(11)
    bns = [mod for mod in m.modules() if isinstance(mod, (torch.nn.BatchNorm2d, torchvision.ops.FrozenBatchNorm2d))]

    def set_stats(mod, inp):
        t = inp[0].detach()
        mod.running_mean.copy_(t.mean(dim=(0, 2, 3)))
        mod.running_var.copy_(t.var(dim=(0, 2, 3)) + 1e-3)
        mod.weight.data.copy_(torch.rand(mod.weight.shape, generator=g) + 0.5)
        mod.bias.data.copy_(torch.rand(mod.bias.shape, generator=g) - 0.5)

    hooks = [b.register_forward_pre_hook(set_stats) for b in bns]
    with torch.no_grad():
        m([torch.from_numpy(x)])
    for hk in hooks:
        hk.remove()


def score_layers(m):
    """The layers whose outputs are class or objectness logits."""
    out = []
    for name, mod in m.named_modules():
        last = name.rsplit(".", 1)[-1]
        if name.startswith("head.classification_head.module_list.") and isinstance(mod, torch.nn.Conv2d):
            out.append(mod)
        elif last in ("cls_logits", "cls_score"):
            out.append(mod)
    return out


def calibrate_scores(m, x, target=1.0):
    # random weights give logits of arbitrary spread: all scores nearly equal
    # (the heads' std 0.01 init) or saturated after random BatchNorm
    # statistics, with ties that leave the order of the detections
    # undefined. Each output channel of each score layer is standardised
    # over the positions of this image: centred, std `target` (twice, as the
    # RPN's choice of proposals moves what the box head sees).
    layers = score_layers(m)
    for _ in range(2):
        stats = {}
        hooks = [l.register_forward_hook(lambda mod, i, o, k=k: stats.setdefault(k, []).append(o.detach()))
                 for k, l in enumerate(layers)]
        with torch.no_grad():
            m([torch.from_numpy(x)])
        for hk in hooks:
            hk.remove()
        for k, l in enumerate(layers):
            o = torch.cat([t.transpose(0, 1).reshape(t.shape[1], -1) for t in stats[k]], dim=1)  # [channels, positions]
            b = torch.zeros(o.shape[0]) if l.bias is None else l.bias.detach()
            o = o - b[:, None]
            sd = o.std(dim=1)
            f = torch.where(sd > 1e-6, target / sd.clamp_min(1e-6), torch.ones_like(sd))
            l.weight.data.mul_(f.reshape((-1,) + (1,) * (l.weight.dim() - 1)))
            if l.bias is not None:
                l.bias.data.copy_(-o.mean(dim=1) * f)


def image(shape):
    # blobs over noise: no two anchors see the same pixels
    rs = np.random.RandomState(3)
    c, h, w = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    x = np.zeros(shape, np.float32)
    for _ in range(6):
        cy, cx, r = rs.uniform(0, h), rs.uniform(0, w), rs.uniform(10, 40)
        x += rs.uniform(0.3, 1.0, (c, 1, 1)).astype(np.float32) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
    # no clipping: a saturated region would be flat, and anchors over flat
    # regions get equal scores
    x = 0.6 * x / x.max() + rs.uniform(0, 0.4, shape)
    return x.astype(np.float32)


def main():
    out = sys.argv[1]
    for name in sys.argv[2:] or ["ssdlite", "fasterrcnn", "maskrcnn"]:
        d = os.path.join(out, name)
        if os.path.exists(os.path.join(d, ".done")):
            continue
        os.makedirs(d, exist_ok=True)
        m, keys, shape = build(name)
        m.eval()
        f = Flat(m, keys)
        x = image(shape)
        randomize(m, x)
        calibrate_scores(m, x)
        np.save(os.path.join(d, "x.npy"), x)
        with torch.no_grad():
            want = f(torch.from_numpy(x))
            torch.onnx.export(f, (torch.from_numpy(x),), os.path.join(d, "model.onnx"), input_names=["x"],
                              output_names=keys, opset_version=13, do_constant_folding=True)
        for k, v in zip(keys, want):
            np.save(os.path.join(d, "expected_%s.npy" % k), v.numpy())
        print(name, {k: tuple(v.shape) for k, v in zip(keys, want)})
        open(os.path.join(d, ".done"), "w").write("ok\n")


if __name__ == "__main__":
    main()
