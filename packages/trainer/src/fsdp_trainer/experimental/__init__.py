"""Experiments: speed features that rely on private torch internals or whose measured gain is within noise.

Each is a model converter (``fsdp_trainer.converters``) behind an ``--experimental.*`` flag, off by default, and
imported only when its flag is on. The dependency is one way: experiments import the trainer; the trainer imports an
experiment only through the converter registry. See ``README.md`` here for what each one is and when it goes.
"""
