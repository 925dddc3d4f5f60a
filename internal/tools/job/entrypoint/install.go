package entrypoint

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Install copies the running binary to dst (mode 0755), through a
// temporary file renamed into place, so a tool container never sees half a
// binary. The operator's image has no shell and no cp: the init container
// runs "agentrun-entrypoint install DST" instead.
func Install(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this binary: %w", err)
	}
	return copyFile(self, dst)
}

func copyFile(src, dst string) (retErr error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".agentrun-entrypoint-*")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
