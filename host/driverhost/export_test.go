package driverhost

// SetProtocolVersions sets the store protocol versions the host offers.
func SetProtocolVersions(c *Config, versions ...int) { c.protocolVersions = versions }
