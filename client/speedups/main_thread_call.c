/* poke_main_thread(): make the main interpreter's main thread stop at its next bytecode, where it runs the calls
   queued with Py_AddPendingCall (sample_loop.c queues its pass so). Until 3.13, Py_AddPendingCall from another thread
   does not: the interpreter's eval breaker is computed for the thread that queues, which cannot run pending calls
   (COMPUTE_EVAL_BREAKER), so the call would wait for the main thread's next GIL handoff, the very cost it avoids; and a
   signal's flag (_PyEval_SignalReceived) is computed the same way. So the flag is set here, as CPython's own signal
   handler does on Windows: the main thread then finds what is to do, and computes the flag again. A store that races
   with the main thread computing it (and so is lost) leaves the call for its next stop (sample_loop.c: a full pass a
   tick later). From 3.13 on, Py_AddPendingCall sets the main thread's own eval breaker. The only file that reads
   CPython's internal headers (3.11's and 3.12's layout of the interpreter state): nothing else is needed of them. */

#define Py_BUILD_CORE 1
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#include "internal/pycore_interp.h"
#endif

#pragma GCC visibility push(hidden)
void poke_main_thread(void);
#pragma GCC visibility pop

void
poke_main_thread(void)
{
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
    _Py_atomic_store_relaxed(&PyInterpreterState_Main()->ceval.eval_breaker, 1);
#endif
}
