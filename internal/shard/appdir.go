package shard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// AppDirMarker is the file kstate writes into an application's state
// directory (<StateDir>/<ApplicationID>) when Run starts, holding the
// application id: the proof that kstate created (or adopted) the
// directory, which kstate reset requires before deleting it.
const AppDirMarker = "KSTATE_APP"

// MarkAppDir creates the application's state directory dir, if needed, and
// its marker naming app. A directory of an older release, without the
// marker, is adopted: its marker is written too.
func MarkAppDir(dir, app string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("state: create the application's state directory: %w", err)
	}
	path := filepath.Join(dir, AppDirMarker)
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == app {
		return nil
	}
	content := app + "\n"
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return fmt.Errorf("state: write the state directory's marker %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("state: write the state directory's marker %s: %w", path, err)
	}
	return nil
}

// ErrNotAppDir is returned by CheckAppDir for a directory that kstate did
// not create.
var ErrNotAppDir = errors.New("not a kstate application state directory")

// CheckAppDir reports whether dir can be deleted as app's state directory:
// nil when it holds the marker naming app, or, a directory of a release
// before the marker, when it holds nothing but shard directories (named by
// their partition number, each with the shard lock file kstate creates);
// an empty directory too. Otherwise an error wrapping ErrNotAppDir says
// what was found. A missing dir is an fs.ErrNotExist error.
func CheckAppDir(dir, app string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrNotAppDir, dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, AppDirMarker)); err == nil {
		if got := strings.TrimSpace(string(b)); got != app {
			return fmt.Errorf("%w: %s belongs to application %q (its %s), not %q", ErrNotAppDir, dir, got, AppDirMarker, app)
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 0 || !e.IsDir() || strconv.Itoa(n) != e.Name() {
			return fmt.Errorf("%w: %s has no %s and holds %q, which is not a shard directory", ErrNotAppDir, dir, AppDirMarker, e.Name())
		}
		if _, err := os.Lstat(filepath.Join(dir, e.Name(), lockFile)); err != nil {
			return fmt.Errorf("%w: %s has no %s and its directory %q has no shard lock file %s", ErrNotAppDir, dir, AppDirMarker, e.Name(), lockFile)
		}
	}
	return nil
}
