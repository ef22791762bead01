"""Dry-run: AutoModel's device meshes built on CPU under torch's fake process group (needs the dryrun extra).

Only this package (and cli.py) may import torch, and only inside functions.
"""
