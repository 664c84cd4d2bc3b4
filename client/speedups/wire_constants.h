/* The wire protocol's numbers the C code writes or relies on, each from its Python definition (named beside it).
   The module exposes them as WIRE_CONSTANTS, and a test holds that dict equal to the Python values: change one side
   and it fails. */
#ifndef RINGTRACE_WIRE_CONSTANTS_H
#define RINGTRACE_WIRE_CONSTANTS_H

/* wire/model.py: values one event takes on the recording path (kind, label, start_ns, end_ns, args), and where its
   args are among them. */
#define RECORD_FIELDS 5
#define RECORD_ARGS 4

/* wire/model.py: what encoder.py's Python path normalises instead of packing as it is (anything past these goes to
   Python). */
#define MAX_ARG_ITEMS 1000
#define MAX_ARG_TEXT 65536

/* wire/frames.py: FRAME_HEADER "<IB" (body size, frame type), EVENTS_HEADER "<HHIIQQ" (header size, flags, track id,
   count, first and last timestamps), FrameType.EVENTS, and the columns of an EVENTS payload (EVENT_COLUMNS). */
#define FRAME_HEADER_SIZE 5
#define EVENTS_HEADER_SIZE 28
#define FRAME_TYPE_EVENTS 6
#define EVENT_COLUMN_COUNT 5

#endif
