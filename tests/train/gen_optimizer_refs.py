"""Reference values for tests/train/optimizer_test.cc, from PyTorch's own optimizers.

Problem: w0 = [0.5, -1.0, 2.0], loss(w) = sum(0.5 * a * w^2) with a = [1.0, 2.0, 0.5], so the
gradient is a * w. Prints w after each of 3 steps (float64) for each configuration.
Run: python3 tests/train/gen_optimizer_refs.py
"""
import torch

A = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
CONFIGS = {
    "adamw": lambda p: torch.optim.AdamW([p], lr=0.1, betas=(0.9, 0.999), eps=1e-8,
                                         weight_decay=0.01),
    "sgd_momentum": lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9),
    "sgd_nesterov_wd": lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True,
                                                 weight_decay=0.1),
}
for name, make in CONFIGS.items():
    w = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    opt = make(w)
    print(name)
    for _ in range(3):
        opt.zero_grad()
        (0.5 * A * w * w).sum().backward()
        opt.step()
        print("  {" + ", ".join(f"{v:.12g}" for v in w.detach().tolist()) + "},")
