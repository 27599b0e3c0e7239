package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// inCI reports whether the tests run in CI, where a missing database or host fails the test
// instead of skipping it.
func inCI() bool { return os.Getenv("CI") != "" }

// unavailable fails the test in CI and skips it loudly (on stderr too, not only with -v)
// otherwise.
func unavailable(t *testing.T, format string, args ...interface{}) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if inCI() {
		t.Fatalf("%s (CI is set: failing instead of skipping)", msg)
	}
	fmt.Fprintf(os.Stderr, "\n!!! SKIPPING %s: %s\n\n", t.Name(), msg)
	t.Skip(msg)
}

// repoRoot is the outboxd repository (this folder is producers/go/e2e).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// hostFiles returns the outboxd binary ($OUTBOXD_BIN, default <repo>/target/debug/outboxd) and
// the webhook plugin, or marks the test unavailable when either is missing.
func hostFiles(t *testing.T) (bin, webhook string) {
	t.Helper()
	root := repoRoot(t)
	bin = os.Getenv("OUTBOXD_BIN")
	if bin == "" {
		bin = filepath.Join(root, "target", "debug", "outboxd")
	}
	webhook = filepath.Join(root, "plugins", "out", "webhook.wasm")
	for _, path := range []string{bin, webhook} {
		if _, err := os.Stat(path); err != nil {
			unavailable(t, "%s is missing (build the host first: make build): %v", path, err)
		}
	}
	return bin, webhook
}

// hostEnv is the test's environment for the host: no admin listener (tests run side by side),
// and no OUTBOXD_* variable of the caller's overriding the test's config file.
func hostEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOXD_") {
			env = append(env, kv)
		}
	}
	return append(env, "OUTBOXD_ADMIN_LISTEN=")
}
