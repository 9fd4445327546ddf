package main

// servePluginIfAsked serves a built-in store driver when this binary was
// re-executed as a driver subprocess. It reports whether it did.
func servePluginIfAsked() (int, bool) { return 0, false }
