"""gpudissect: discover and quantify the undisclosed architecture of NVIDIA GPUs."""

__version__ = "0.1.0"
