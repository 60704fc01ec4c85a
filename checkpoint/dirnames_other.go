//go:build !linux

package checkpoint

import "os"

// readDirNames returns the names in dir that keep accepts.
func readDirNames(dir string, keep func(name []byte) bool) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	all, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	names := all[:0]
	for _, name := range all {
		if keep([]byte(name)) {
			names = append(names, name)
		}
	}
	return names, nil
}
