"""Continuous sampling: a thread that takes every other thread's Python stack at a steady rate and records each as a
``sample`` event on a track of that thread (``start_sampler``)."""

from ringtrace.client.sampling.sampler import DEFAULT_HZ, Sampler, start_sampler

__all__ = ["DEFAULT_HZ", "Sampler", "start_sampler"]
