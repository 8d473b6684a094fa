"""The host probe: kernel trace events of a host (tracefs, libtraceevent), a source kind of its own."""
