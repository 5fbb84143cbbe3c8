"""Run at start-up by every process of the real-server harness (the server and its children).

SGLang imports torchvision (for multimodal model configs). The torchvision wheel the registry
serves for Linux is built against CUDA torch, so its compiled ops library cannot load next to the
CPU torch build; its Python modules then fail registering fake kernels for two ops the compiled
library would have defined. Defining those two op schemas (no kernels) lets the real torchvision
Python package import; the server never calls them.
"""

try:
    import torch

    _torchvision_ops = torch.library.Library("torchvision", "DEF")
    _torchvision_ops.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _torchvision_ops.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
except Exception:  # torch missing or the ops already defined: nothing to do
    pass
