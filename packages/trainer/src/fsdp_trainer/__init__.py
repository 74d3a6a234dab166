"""fsdp_trainer: PyTorch FSDP (FSDP2 and FSDP1) training of Hugging Face Llama models.

The config (``fsdp_trainer.config``) imports without torch, so tools can validate
settings offline; everything else is imported when a run starts.
"""

from .config import ConfigError, TrainerConfig, load_config

__all__ = ["ConfigError", "TrainerConfig", "load_config"]
__version__ = "0.1.0"
