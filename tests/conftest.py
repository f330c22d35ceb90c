import torch

torch.set_num_threads(1)  # same as the harness default: fast and stable on a shared 2-core machine
