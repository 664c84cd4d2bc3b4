"""The collector streamer: a sans-I/O link (handshake, queue, acks, backoff) driven by a thin socket thread."""
