"""Delivery: the flusher that drains timelines, the listeners it hands their events to (file, memory) and the
collector streamer (``streaming/``). It knows the recording side only through the flusher's ``Sweepable`` protocol."""
