// Package examples holds the tests of the example policy guests in the
// directories below it (README.md): each is rebuilt from source, compared
// with its committed module, and run against cases.json.
package examples
