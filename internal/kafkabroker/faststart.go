package kafkabroker

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A cluster's start is mostly its JVMs' CPU on a small machine (three
// brokers loading and initialising the same classes at once; the quorum's
// election and the brokers' registration take about a second of it), so
// StartCluster saves JVMs and class loading:
//
//   - Storage: a KRaft log directory is a meta.properties (cluster id,
//     node id, a directory id) and a bootstrap.checkpoint (the feature
//     levels: the same for every cluster of one Kafka version). The
//     checkpoint is made once per cache by kafka-storage format and copied;
//     meta.properties is written per node: no format JVM per node and
//     start.
//   - Class data sharing: the classes a node loaded are dumped once into a
//     CDS archive in the cache (java -Xshare:dump); later JVMs map it
//     instead of loading and verifying those classes from the jars. A JVM
//     that cannot use the archive (another JDK) ignores it.

// cacheBase is the version's cache directory (libs' parent).
func cacheBase(libs string) string { return filepath.Dir(libs) }

// bootstrapCheckpoint returns the path of the cached bootstrap.checkpoint,
// formatting one (a throwaway directory, one JVM) when the cache has none.
func bootstrapCheckpoint(ctx context.Context, java, libs string) (string, error) {
	path := filepath.Join(cacheBase(libs), "kraft-bootstrap.checkpoint")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	tmp, err := os.MkdirTemp("", "kstate-kafka-format-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	props := filepath.Join(tmp, "server.properties")
	cfg := strings.Join([]string{
		"process.roles=broker,controller",
		"node.id=1",
		"controller.quorum.voters=1@127.0.0.1:9",
		"listeners=PLAINTEXT://127.0.0.1:8,CONTROLLER://127.0.0.1:9",
		"controller.listener.names=CONTROLLER",
		"log.dirs=" + filepath.Join(tmp, "data"),
		"",
	}, "\n")
	if err := os.WriteFile(props, []byte(cfg), 0o644); err != nil {
		return "", err
	}
	format := exec.CommandContext(ctx, java, "-XX:TieredStopAtLevel=1", "-cp", filepath.Join(libs, "*"),
		"kafka.tools.StorageTool", "format", "--cluster-id="+clusterID(), "-c", props)
	if out, err := format.CombinedOutput(); err != nil {
		return "", fmt.Errorf("kafkabroker: kafka storage format failed: %w\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(tmp, "data", "bootstrap.checkpoint"))
	if err != nil {
		return "", fmt.Errorf("kafkabroker: kafka storage format wrote no bootstrap.checkpoint: %w", err)
	}
	return path, writeAtomic(path, b)
}

// formatLogDir makes dir a formatted KRaft log directory of node id in
// cluster clusterID, from the cached checkpoint (what kafka-storage format
// writes).
func formatLogDir(dir, checkpoint, clusterID string, id int32) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile(checkpoint)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bootstrap.checkpoint"), b, 0o644); err != nil {
		return err
	}
	var u [16]byte
	_, _ = rand.Read(u[:])
	meta := fmt.Sprintf("node.id=%d\ndirectory.id=%s\nversion=1\ncluster.id=%s\n", id, base64.RawURLEncoding.EncodeToString(u[:]), clusterID)
	return os.WriteFile(filepath.Join(dir, "meta.properties"), []byte(meta), 0o644)
}

// cdsArchive is the cached class-data-sharing archive of the broker's
// classes; cdsClassList the class list a node writes to make it.
func cdsArchive(libs string) string   { return filepath.Join(cacheBase(libs), "kafka-classes.jsa") }
func cdsClassList(libs string) string { return filepath.Join(cacheBase(libs), "kafka-classes.lst") }

// cdsArgs are the JVM options of a node: use the archive when the cache
// has one; else, for the node that records (record), write the class list
// the archive is made from.
func cdsArgs(libs string, record bool) []string {
	if os.Getenv("KSTATE_NO_CDS") != "" {
		return nil
	}
	if _, err := os.Stat(cdsArchive(libs)); err == nil {
		return []string{"-XX:SharedArchiveFile=" + cdsArchive(libs), "-Xlog:cds=off", "-Xlog:cds+dynamic=off"}
	}
	if record {
		return []string{"-XX:DumpLoadedClassList=" + cdsClassList(libs) + fmt.Sprintf(".%d", os.Getpid())}
	}
	return nil
}

// makeCDSArchive dumps the archive from the class list a node recorded
// (a few seconds, once per cache); errors only cost the speed-up.
func makeCDSArchive(ctx context.Context, java, libs string) error {
	list := cdsClassList(libs) + fmt.Sprintf(".%d", os.Getpid())
	if _, err := os.Stat(list); err != nil {
		return nil // nothing recorded (the archive existed, or KSTATE_NO_CDS)
	}
	defer os.Remove(list)
	// The node still runs and appends: take the complete lines so far.
	b, err := os.ReadFile(list)
	if err != nil {
		return err
	}
	if i := strings.LastIndexByte(string(b), '\n'); i >= 0 {
		b = b[:i+1]
	}
	done := list + ".done"
	if err := os.WriteFile(done, b, 0o644); err != nil {
		return err
	}
	defer os.Remove(done)
	tmp := cdsArchive(libs) + fmt.Sprintf(".%d.tmp", os.Getpid())
	dump := exec.CommandContext(ctx, java, "-Xshare:dump", "-XX:SharedClassListFile="+done,
		"-XX:SharedArchiveFile="+tmp, "-cp", filepath.Join(libs, "*"))
	if out, err := dump.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("kafkabroker: class data sharing archive not made: %w\n%s", err, lastLines(string(out), 10))
	}
	return os.Rename(tmp, cdsArchive(libs))
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// writeAtomic writes path through a temporary file and a rename: parallel
// test processes share the cache.
func writeAtomic(path string, b []byte) error {
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
