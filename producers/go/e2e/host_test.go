package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// host runs the outboxd binary against one test database.
type host struct {
	bin    string
	config string
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

// newHost writes the host's config (SPEC.md, "End-to-end test") for database url, tenants
// appCodes and the webhook at hookURL (http://127.0.0.1:<port>/hook).
func newHost(t *testing.T, url string, appCodes []string, hookURL string) *host {
	t.Helper()
	bin, webhook := hostFiles(t)
	origin := strings.TrimSuffix(hookURL, "/hook")
	quoted := make([]string, len(appCodes))
	for i, code := range appCodes {
		quoted[i] = tomlString(code)
	}
	config := fmt.Sprintf(`[database]
url = %s

[worker]
app_codes = [%s]
poll_interval = "100ms"

[[route]]
event_type = "*"
sink = "hook"

[[sink]]
name = "hook"
plugin = %s
config = { url = %s, secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", content_type = "json" }
limits = { allow_hosts = [%s], allow_private_addresses = true }
`, tomlString(url), strings.Join(quoted, ", "), tomlString(webhook), tomlString(hookURL), tomlString(origin))
	path := filepath.Join(t.TempDir(), "outboxd.toml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return &host{bin: bin, config: path}
}

// run runs `outboxd --config <file> <args>` to its end (3 minutes at most) and fails the test
// unless it exits 0.
func (h *host) run(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, append([]string{"--config", h.config}, args...)...)
	cmd.Env = hostEnv()
	started := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("outboxd %s: %v after %s\n%s", strings.Join(args, " "), err, time.Since(started).Round(time.Millisecond), out)
	}
	t.Logf("outboxd %s: done in %s", strings.Join(args, " "), time.Since(started).Round(time.Millisecond))
}
