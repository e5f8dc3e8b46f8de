package app

import (
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestWithDefaults checks the defaults Run applies and what it derives,
// so that a Config built in a test gets what `fieldwatch run` would.
func TestWithDefaults(t *testing.T) {
	state := t.TempDir()
	tests := []struct {
		name  string
		cfg   Config
		check func(t *testing.T, c Config)
	}{
		{"zero", Config{}, func(t *testing.T, c Config) {
			if c.Workers != DefaultWorkers || c.GracePeriod != DefaultGracePeriod || c.LeaseName != DefaultLeaseName ||
				c.LeaseDuration != DefaultLeaseDuration || c.RenewDeadline != DefaultRenewDeadline || c.RetryPeriod != DefaultRetryPeriod ||
				c.CRDImpactMaxObjects != DefaultCRDImpactMaxObjects || c.CRDImpactTimeout != DefaultCRDImpactTimeout || c.Logger == nil ||
				c.DiscoveryInterval != DefaultDiscoveryInterval || c.Namespaces != nil {
				t.Errorf("defaults not applied: %+v", c)
			}
			if c.Audit.LogStateFile != "" {
				t.Errorf("audit state %q without an audit log", c.Audit.LogStateFile)
			}
		}},
		{"set values stay", Config{Workers: 9, GracePeriod: time.Second, LeaseName: "mine"}, func(t *testing.T, c Config) {
			if c.Workers != 9 || c.GracePeriod != time.Second || c.LeaseName != "mine" {
				t.Errorf("set values changed: %+v", c)
			}
		}},
		{"each shard its Lease", Config{LeaderElect: true, Shard: 1, TotalShards: 3}, func(t *testing.T, c Config) {
			if c.LeaseName != "fieldwatch-shard-1-of-3" {
				t.Errorf("LeaseName = %q, want fieldwatch-shard-1-of-3", c.LeaseName)
			}
		}},
		{"the default name given is the shard's", Config{LeaderElect: true, LeaseName: DefaultLeaseName, Shard: 0, TotalShards: 2}, func(t *testing.T, c Config) {
			if c.LeaseName != "fieldwatch-shard-0-of-2" {
				t.Errorf("LeaseName = %q, want fieldwatch-shard-0-of-2", c.LeaseName)
			}
		}},
		{"a named shard Lease stays", Config{LeaderElect: true, LeaseName: "mine", TotalShards: 2}, func(t *testing.T, c Config) {
			if c.LeaseName != "mine" {
				t.Errorf("LeaseName = %q, want mine", c.LeaseName)
			}
		}},
		{"no election, no shard Lease", Config{TotalShards: 2}, func(t *testing.T, c Config) {
			if c.LeaseName != DefaultLeaseName {
				t.Errorf("LeaseName = %q, want %s", c.LeaseName, DefaultLeaseName)
			}
		}},
		{"audit state in the state directory", Config{StateDir: state, Audit: AuditConfig{LogPath: "/var/log/audit.log"}}, func(t *testing.T, c Config) {
			if want := filepath.Join(state, "audit-log.state"); c.Audit.LogStateFile != want {
				t.Errorf("LogStateFile = %q, want %q", c.Audit.LogStateFile, want)
			}
		}},
		{"audit state given stays", Config{StateDir: state, Audit: AuditConfig{LogPath: "/a.log", LogStateFile: "/elsewhere"}}, func(t *testing.T, c Config) {
			if c.Audit.LogStateFile != "/elsewhere" {
				t.Errorf("LogStateFile = %q, want /elsewhere", c.Audit.LogStateFile)
			}
		}},
		{"namespaces sorted, each once", Config{Namespaces: []string{"b", "a", "b"}}, func(t *testing.T, c Config) {
			if !slices.Equal(c.Namespaces, []string{"a", "b"}) {
				t.Errorf("Namespaces = %v, want [a b]", c.Namespaces)
			}
		}},
		{"no state directory, no audit state", Config{Audit: AuditConfig{LogPath: "/a.log"}}, func(t *testing.T, c Config) {
			if c.Audit.LogStateFile != "" {
				t.Errorf("LogStateFile = %q, want none", c.Audit.LogStateFile)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, tt.cfg.withDefaults())
		})
	}
}
