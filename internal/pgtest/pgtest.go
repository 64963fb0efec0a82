// Package pgtest starts a throwaway PostgreSQL server for a test, from the
// Debian `postgresql` package (`make deps` installs it): initdb in a
// short temporary directory, the server on a free port with the unix
// socket in that directory, stopped and removed in the test's Cleanup.
// initdb and postgres refuse to run as root, so as root they run as the
// `postgres` user through runuser, with the directory chowned to it.
//
// Without PostgreSQL installed, Start skips the test loudly, unless CI is
// set: then the test fails (CI must run it).
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is a running PostgreSQL server.
type Server struct {
	// DSN connects as the superuser postgres (trust auth) over TCP to the
	// database postgres: postgres://postgres@127.0.0.1:<port>/postgres?sslmode=disable.
	DSN  string
	Port int
	Dir  string // data directory's parent, also the socket directory
}

// binDir returns the newest /usr/lib/postgresql/<version>/bin holding
// initdb and pg_ctl.
func binDir() (string, bool) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) < version(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
				return dirs[i], true
			}
		}
	}
	return "", false
}

func version(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// Start starts a server for t and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, ok := binDir()
	if !ok {
		msg := "pgtest: PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/{initdb,pg_ctl}): install the Debian package postgresql (`make deps`)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI is set, so this test must run")
		}
		t.Skip("SKIPPED LOUDLY: " + msg)
	}
	// Short: the socket path <dir>/.s.PGSQL.<port> must stay under 107 bytes.
	dir, err := os.MkdirTemp("/tmp", "pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	asPostgres := os.Geteuid() == 0
	if asPostgres {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: running as root needs the postgres user (created by the postgresql package): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, args ...string) (string, error) {
		path := filepath.Join(bin, name)
		var cmd *exec.Cmd
		if asPostgres {
			cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
		} else {
			cmd = exec.Command(path, args...)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	data := filepath.Join(dir, "data")
	if out, err := run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off", port, dir)
	start := time.Now()
	if out, err := run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "pg.log"), "-w", "-t", "30", "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "pg.log"))
		t.Fatalf("pgtest: pg_ctl start: %v\n%s\nserver log:\n%s", err, out, log)
	}
	t.Cleanup(func() {
		if out, err := run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
			t.Logf("pgtest: pg_ctl stop: %v\n%s", err, strings.TrimSpace(out))
		}
	})
	t.Logf("pgtest: PostgreSQL from %s on 127.0.0.1:%d (started in %v)", bin, port, time.Since(start).Round(time.Millisecond))
	return &Server{DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), Port: port, Dir: dir}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
