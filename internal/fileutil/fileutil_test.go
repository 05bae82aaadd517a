package fileutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteNew(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing")
	require.NoError(t, os.WriteFile(existing, []byte("kept"), 0o644))
	for _, tc := range []struct {
		name     string
		path     string
		mode     os.FileMode
		wantErr  error
		wantData string
	}{
		{name: "a new file, owner only", path: filepath.Join(dir, "key"), mode: 0o600, wantData: "secret\n"},
		{name: "a new file, readable", path: filepath.Join(dir, "master.yaml"), mode: 0o644, wantData: "secret\n"},
		{name: "an existing file is left as it is", path: existing, mode: 0o600, wantErr: os.ErrExist, wantData: "kept"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := WriteNew(tc.path, []byte("secret\n"), tc.mode)
			require.ErrorIs(t, err, tc.wantErr)
			data, rerr := os.ReadFile(tc.path)
			require.NoError(t, rerr)
			assert.Equal(t, tc.wantData, string(data))
			if tc.wantErr == nil {
				st, err := os.Stat(tc.path)
				require.NoError(t, err)
				assert.Equal(t, tc.mode, st.Mode().Perm())
			}
		})
	}
	t.Run("a folder that is not there", func(t *testing.T) {
		require.Error(t, WriteNew(filepath.Join(dir, "none", "key"), nil, 0o600))
	})
}
