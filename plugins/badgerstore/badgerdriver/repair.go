package badgerdriver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// removeEmptyMemtables deletes the memtable logs (*.mem) of dir that are
// empty. badger creates a memtable log and sizes it in two steps; a process
// killed between them leaves a file of zero bytes, which holds no write
// (every acknowledged write is in a log that was sized first) but which
// badger.Open refuses ("while opening memtables … Create a new file"), so
// the store could not open again after a SIGKILL at that instant. The caller
// holds the directory's process lock.
func removeEmptyMemtables(dir string, log hclog.Logger) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".mem") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if info.Size() != 0 {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("removing the empty memtable log %s: %w", p, err)
		}
		log.Warn("removed an empty memtable log left by a process killed while creating it", "file", p)
	}
	return nil
}
