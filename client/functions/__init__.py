"""Function tracing: every call of the program's Python functions a span on its thread (``trace_functions``)."""

from ringtrace.client.functions.function_tracing import FunctionTracing, trace_functions

__all__ = ["FunctionTracing", "trace_functions"]
