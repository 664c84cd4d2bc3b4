"""The ground floor: the protocol both sides share (frames, reader, session decoder and model, errors, message
rendering, the size/address/token parsers, the version and the C-or-Python switch). It imports nothing else of
ringtrace; the client and the collector import it."""
