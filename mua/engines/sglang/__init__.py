"""The SGLang engine: a client of one or more SGLang (or `mua serve`) HTTP servers, the command
that launches a co-located server, and the weight push (buckets, wire encoding, probe)."""
