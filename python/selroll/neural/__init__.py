"""selroll.neural: a small decoder-only transformer agent for the household environment.

Torch is imported only inside this sub-package. `python3 -m selroll.neural pretrain|serve|eval`.
"""
