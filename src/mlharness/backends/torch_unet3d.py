"""The 3D-UNet of the KiTS19 benchmark, written out so the official training checkpoint
(``3dunet_kits19_pytorch_checkpoint.pth``: a state dict under ``best_model_state_dict``) loads
key for key: the graph ``pytorch_checkpoint_SUT.py`` describes (MLPerf Training's UNet-3D).

Each block is a convolution (no bias: an instance norm with scale and shift follows), the norm
and a ReLU, twice: ``input_block``, ``downsample.N`` (the first convolution of stride 2),
``bottleneck``; ``upsample.N`` doubles the size with a 2x2x2 transposed convolution (with bias),
concatenates the skip of the same size and runs two blocks; ``output`` is a 1x1x1 convolution
(with bias) to the three classes. The widths are read from the state dict (the official:
32, 64, 128, 256, 320), so a narrower checkpoint of the same graph loads too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _block(c_in: int, c_out: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv3d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                         nn.InstanceNorm3d(c_out, affine=True), nn.ReLU())


class _Double(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _block(c_in, c_out, stride)
        self.conv2 = _block(c_out, c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x))


class _Up(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.upsample_conv = nn.Sequential(nn.ConvTranspose3d(c_in, c_out, 2, stride=2),
                                           nn.Identity(), nn.Identity())
        self.conv1 = _block(2 * c_out, c_out)
        self.conv2 = _block(c_out, c_out)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        x = torch.cat((self.upsample_conv(x), skip), dim=1)
        return self.conv2(self.conv1(x))


class _Output(nn.Module):
    def __init__(self, c_in: int, classes: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv3d(c_in, classes, 1), nn.Identity(), nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class Unet3D(nn.Module):
    """The KiTS19 3D-UNet with ``filters`` channels per level."""

    def __init__(self, filters: tuple[int, ...] = (32, 64, 128, 256, 320),
                 classes: int = 3) -> None:
        super().__init__()
        self.input_block = _Double(1, filters[0])
        self.downsample = nn.ModuleList(
            _Double(c_in, c_out, stride=2) for c_in, c_out in zip(filters[:-1], filters[1:]))
        self.bottleneck = _Double(filters[-1], filters[-1], stride=2)
        ups = [(filters[-1], filters[-1])] + list(zip(reversed(filters[1:]),
                                                      reversed(filters[:-1])))
        self.upsample = nn.ModuleList(_Up(c_in, c_out) for c_in, c_out in ups)
        self.output = _Output(filters[0], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.input_block(x)
        skips = [x]
        for down in self.downsample:
            x = down(x)
            skips.append(x)
        x = self.bottleneck(x)
        for up, skip in zip(self.upsample, reversed(skips)):
            x = up(x, skip)
        return self.output(x)


def unet3d_from_state(state: dict[str, Any]) -> Unet3D:
    """The module whose widths ``state`` has (its convolutions' output channels)."""
    filters = [int(state["input_block.conv1.0.weight"].shape[0])]
    n = 0
    while f"downsample.{n}.conv1.0.weight" in state:
        filters.append(int(state[f"downsample.{n}.conv1.0.weight"].shape[0]))
        n += 1
    classes = int(state["output.conv.0.weight"].shape[0])
    return Unet3D(tuple(filters), classes)
