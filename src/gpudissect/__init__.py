"""gpudissect: discover and quantify the undisclosed architecture of NVIDIA GPUs."""

__version__ = "0.1.0"

from pathlib import Path as _Path

DATA_DIR = _Path(__file__).resolve().parent / "data"  # architecture and reference data files
