package driverhost

// SetProtocolVersions sets the store protocol versions the host offers.
func SetProtocolVersions(c *Config, versions ...int) { c.protocolVersions = versions }

// SetBeforePublish sets a function start runs just before it publishes a
// new subprocess to Kill.
func SetBeforePublish(d *Driver, f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.beforePublish = f
}
