#!/usr/bin/python3
"""Exports torchvision's detectors with PyTorch 1.13 for the parity test
tests/integration/onnx_detectors.py: ssdlite320_mobilenet_v3_large,
fasterrcnn_mobilenet_v3_large_320_fpn and maskrcnn_resnet50_fpn, seeded
random weights (no downloads; BatchNorm statistics and the heads' layers
standardised on the image, so that the detections are many and distinct in
score), a small input image, low score thresholds. Writes OUT/NAME/model.onnx,
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
        return m, ["boxes", "scores", "labels"], (3, 320, 320)  # min_size 320: no resize
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


def head_layers(m):
    """The layers whose outputs are class or objectness logits, and the
    hidden layers of the heads without BatchNorm before them (FPN, RPN conv,
    box and mask heads)."""
    scores, hidden = [], []
    for name, mod in m.named_modules():
        last = name.rsplit(".", 1)[-1]
        if not isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            continue
        if name.startswith("head.classification_head.module_list.") or last in ("cls_logits", "cls_score"):
            scores.append(mod)
        elif name.startswith(("backbone.fpn.", "rpn.head.conv", "roi_heads.box_head.", "roi_heads.mask_head.")):
            hidden.append(mod)
    return scores, hidden


def calibrate_heads(m, x):
    # Random weights give logits of arbitrary spread: scores nearly equal or
    # saturated, ties that leave the order of the detections undefined, and
    # small differences between RoIs that only a large gain separates (which
    # amplifies float32 rounding as much). Each output channel of the heads'
    # hidden layers is standardised over the positions (RoIs) of this image
    # as a BatchNorm would (mean 0, std 1), each score layer's to std 1,
    # layer by layer in one pass (a forward hook rescales the layer and
    # returns the rescaled output); twice, as the RPN's choice of proposals
    # moves what the box head sees.
    scores, hidden = head_layers(m)

    def standardise(mod, inp, out):
        o = out.detach().transpose(0, 1).reshape(out.shape[1], -1)
        b = torch.zeros(o.shape[0]) if mod.bias is None else mod.bias.detach()
        o = o - b[:, None]
        sd = o.std(dim=1) if o.shape[1] > 1 else torch.zeros(o.shape[0])
        f = torch.where(sd > 1e-6, 1.0 / sd.clamp_min(1e-6), torch.ones_like(sd))
        mod.weight.data.mul_(f.reshape((-1,) + (1,) * (mod.weight.dim() - 1)))
        if mod.bias is not None:
            mod.bias.data.copy_(-o.mean(dim=1) * f)
        return torch.nn.functional.linear(inp[0], mod.weight, mod.bias) if isinstance(mod, torch.nn.Linear) else \
            mod._conv_forward(inp[0], mod.weight, mod.bias)

    for _ in range(2):
        hooks = [l.register_forward_hook(standardise) for l in scores + hidden]
        with torch.no_grad():
            m([torch.from_numpy(x)])
        for hk in hooks:
            hk.remove()


def image(shape, smooth_noise):
    # blobs over noise: no two anchors see the same pixels
    rs = np.random.RandomState(3)
    c, h, w = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    x = np.zeros(shape, np.float32)
    for _ in range(6):
        cy, cx, r = rs.uniform(0, h), rs.uniform(0, w), rs.uniform(10, 40)
        x += rs.uniform(0.3, 1.0, (c, 1, 1)).astype(np.float32) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
    # no clipping: a saturated region would be flat, and anchors over flat
    # regions get equal scores; smooth noise (a coarse random grid,
    # bilinear): no flat region, yet small gradients, so that the float32
    # rounding of box corners moves the RoI features little (pixel noise
    # made the scores of R-CNN differ by 2.6e-4 between PyTorch and ONNX
    # Runtime); SSDlite, with no RoIs, takes pixel noise (its 1x1 heads
    # would tie on smooth input)
    if smooth_noise:
        coarse = torch.from_numpy(rs.uniform(0, 1, (1, c, h // 8 + 1, w // 8 + 1)).astype(np.float32))
        noise = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)[0].numpy()
    else:
        noise = rs.uniform(0, 1, shape)
    x = 0.6 * x / x.max() + 0.4 * noise
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
        x = image(shape, name != "ssdlite")
        randomize(m, x)
        calibrate_heads(m, x)
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
