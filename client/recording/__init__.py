"""Recording: the timelines, their buffers and gates, and the model of what is recorded (typed events, messages,
sources, tracks, trace context). What runs on the recording threads lives here; it hands its events to the flusher
(``ringtrace.client.delivery.flusher``) and knows nothing else of delivery."""
