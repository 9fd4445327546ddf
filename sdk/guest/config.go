package guest

import "github.com/agenthost/agenthost/internal/jsonlite"

// Config is a guest's configuration blob parsed as a JSON object, for
// Guest.Init. Its getters check the type of a member and return the zero value
// (or the default given) when the member is absent.
type Config struct{ m map[string]any }

// ParseConfig parses a configuration blob as a JSON object whose members are
// all among allowed: an unknown member is an error, so a misspelt option fails
// the load instead of being ignored. An empty blob is an empty object.
// ParseConfig uses no reflection: encoding/json would add over a megabyte to
// a guest.
func ParseConfig(b []byte, allowed ...string) (Config, error) {
	m, err := jsonlite.Object(b, allowed...)
	if err != nil {
		return Config{}, errorString("config: " + err.Error())
	}
	return Config{m}, nil
}

// Bool returns member name: false if absent, an error if not true or false.
func (c Config) Bool(name string) (bool, error) { return cfgErr(jsonlite.Bool(c.m, name)) }

// String returns member name: "" if absent, an error if not a string.
func (c Config) String(name string) (string, error) { return cfgErr(jsonlite.String(c.m, name)) }

// Int returns member name: def if absent, an error if not an integer.
func (c Config) Int(name string, def int) (int, error) { return cfgErr(jsonlite.Int(c.m, name, def)) }

// Strings returns member name: nil if absent, an error if not an array of
// strings.
func (c Config) Strings(name string) ([]string, error) { return cfgErr(jsonlite.Strings(c.m, name)) }

// Has reports whether member name is present (and not null).
func (c Config) Has(name string) bool { return c.m[name] != nil }

func cfgErr[T any](v T, err error) (T, error) {
	if err != nil {
		return v, errorString("config: " + err.Error())
	}
	return v, nil
}

type errorString string

func (e errorString) Error() string { return string(e) }
