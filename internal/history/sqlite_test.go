package history

import (
	"path/filepath"
	"testing"
)

func openSQLite(t *testing.T) Store {
	t.Helper()
	s, err := OpenSQLite(filepath.Join(t.TempDir(), "history.db"), SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestSQLite(t *testing.T) { storeSuite(t, openSQLite) }
