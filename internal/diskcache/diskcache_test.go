package diskcache

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func payload(t *testing.T, n int) []byte {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// counting is a compiler that returns want and counts its calls.
func counting(want []byte, calls *atomic.Int32) func() ([]byte, error) {
	return func() ([]byte, error) { calls.Add(1); return append([]byte(nil), want...), nil }
}

func TestKeyChangesWithEveryPart(t *testing.T) {
	base := []string{"source", "--opt", "sm_90", "nvrtc 13.0", "driver 13000", "0.2.0"}
	k0 := NewKey(base...)
	require.Equal(t, k0, NewKey(base...))
	for i := range base {
		parts := append([]string(nil), base...)
		parts[i] += "x"
		require.NotEqual(t, k0, NewKey(parts...), "part %d", i)
	}
	// the length prefix keeps a boundary shift from giving the same key
	require.NotEqual(t, NewKey("ab", "c"), NewKey("a", "bc"))
	require.NotEqual(t, NewKey("a"), NewKey("a", ""))
}

func TestDir(t *testing.T) {
	t.Setenv(Env, "")
	t.Setenv("XDG_CACHE_HOME", "/x")
	t.Setenv("HOME", "/h")
	require.Equal(t, "/x/metalcore", Dir())
	t.Setenv("XDG_CACHE_HOME", "")
	require.Equal(t, "/h/.cache/metalcore", Dir())
	t.Setenv("HOME", "")
	require.Equal(t, "", Dir())
	t.Setenv(Env, "/m")
	require.Equal(t, "/m", Dir())
	t.Setenv(Env, Off)
	require.Equal(t, "", Dir())
}

func TestBuildStoresAndHits(t *testing.T) {
	c := Open(filepath.Join(t.TempDir(), "a", "b")) // created on first Put
	k, want := NewKey("k"), payload(t, 1000)
	var calls atomic.Int32
	got, src, err := c.Build(k, counting(want, &calls))
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, Compiled, src)
	got, src, err = c.Build(k, counting(want, &calls))
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, Hit, src)
	require.EqualValues(t, 1, calls.Load())
	// an empty payload is an entry too
	_, _, err = c.Build(NewKey("empty"), counting(nil, &calls))
	require.NoError(t, err)
	got, ok := c.Get(NewKey("empty"))
	require.True(t, ok)
	require.Empty(t, got)
}

func TestBuildFailureStoresNothing(t *testing.T) {
	c := Open(t.TempDir())
	_, _, err := c.Build(NewKey("k"), func() ([]byte, error) { return nil, fmt.Errorf("no") })
	require.EqualError(t, err, "no")
	_, ok := c.Get(NewKey("k"))
	require.False(t, ok)
}

// Every damaged entry is a miss and is rebuilt; the rebuilt entry verifies.
func TestDamagedEntriesAreRebuilt(t *testing.T) {
	damage := map[string]func(b []byte) []byte{
		"truncated payload": func(b []byte) []byte { return b[:len(b)-1] },
		"truncated header":  func(b []byte) []byte { return b[:headerSize-1] },
		"empty file":        func(b []byte) []byte { return nil },
		"flipped payload":   func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"flipped checksum":  func(b []byte) []byte { b[headerSize-1] ^= 1; return b },
		"wrong size":        func(b []byte) []byte { b[len(magic)+32] ^= 1; return b },
		"other format":      func(b []byte) []byte { b[0] ^= 1; return b },
		"appended bytes":    func(b []byte) []byte { return append(b, 0) },
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			c := Open(t.TempDir())
			k, want := NewKey(name), payload(t, 4096)
			require.NoError(t, c.Put(k, want))
			b, err := os.ReadFile(c.Path(k))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(c.Path(k), f(b), 0o644))
			_, ok := c.Get(k)
			require.False(t, ok)
			var calls atomic.Int32
			got, src, err := c.Build(k, counting(want, &calls))
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.Equal(t, Compiled, src)
			got, ok = c.Get(k)
			require.True(t, ok)
			require.Equal(t, want, got)
		})
	}
}

// An entry copied under another key's name is not that key's.
func TestForeignEntryIsAMiss(t *testing.T) {
	c := Open(t.TempDir())
	a, b := NewKey("a"), NewKey("b")
	require.NoError(t, c.Put(a, []byte("image a")))
	data, err := os.ReadFile(c.Path(a))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(c.Path(b), data, 0o644))
	_, ok := c.Get(b)
	require.False(t, ok)
}

// A cache that cannot be written builds every time, without an error.
func TestUnwritableCacheStillBuilds(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for name, c := range map[string]Cache{"under a file": Open(filepath.Join(file, "cache")), "off": Open("")} {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int32
			for range 2 {
				got, src, err := c.Build(NewKey("k"), counting([]byte("x"), &calls))
				require.NoError(t, err)
				require.Equal(t, []byte("x"), got)
				require.Equal(t, Compiled, src)
			}
			require.EqualValues(t, 2, calls.Load())
		})
	}
}

// A read-only directory still serves its entries, and a new key is built
// (stored only where the user may write anyway, as root may).
func TestReadOnlyDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ro")
	c := Open(dir)
	require.NoError(t, c.Put(NewKey("old"), []byte("old")))
	require.NoError(t, os.Chmod(dir, 0o555))
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	got, src, err := c.Build(NewKey("old"), func() ([]byte, error) { return nil, fmt.Errorf("must not compile") })
	require.NoError(t, err)
	require.Equal(t, []byte("old"), got)
	require.Equal(t, Hit, src)
	got, _, err = c.Build(NewKey("new"), func() ([]byte, error) { return []byte("new"), nil })
	require.NoError(t, err)
	require.Equal(t, []byte("new"), got)
	left, err := filepath.Glob(filepath.Join(dir, ".tmp-*"))
	require.NoError(t, err)
	require.Empty(t, left)
}

// Processes filling one empty cache at once all get the payload, and one
// valid entry is left (no temporary files).
func TestProcessesRaceOnAnEmptyCache(t *testing.T) {
	if dir := os.Getenv("MC_DISKCACHE_RACER"); dir != "" {
		want := []byte(os.Getenv("MC_DISKCACHE_PAYLOAD"))
		for i := range 50 { // many rounds make overlapping writes likely
			got, _, err := Open(dir).Build(NewKey("shared", fmt.Sprint(i%5)), func() ([]byte, error) { return want, nil })
			if err != nil || string(got) != string(want) {
				fmt.Fprintln(os.Stderr, "racer got", err, len(got))
				os.Exit(1)
			}
		}
		return
	}
	dir := filepath.Join(t.TempDir(), "cache")
	want := string(payload(t, 48))
	want = fmt.Sprintf("%x", want) // printable for the environment
	var cmds []*exec.Cmd
	for range 4 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestProcessesRaceOnAnEmptyCache$", "-test.count=1")
		cmd.Env = append(os.Environ(), "MC_DISKCACHE_RACER="+dir, "MC_DISKCACHE_PAYLOAD="+want)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); errors.Is(err, syscall.ENOEXEC) {
			// under user-mode emulation (arm64 on qemu) the binary cannot
			// start itself; TestGoroutinesRaceOnAnEmptyCache still runs
			t.Skipf("the test binary cannot re-execute itself here: %v", err)
		} else {
			require.NoError(t, err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait())
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 5, "one entry per key, no temporary files")
	for i := range 5 {
		got, ok := Open(dir).Get(NewKey("shared", fmt.Sprint(i)))
		require.True(t, ok)
		require.Equal(t, want, string(got))
	}
}

// Goroutines filling one empty cache at once all get the payload and leave
// one valid entry a key, no temporary files.
func TestGoroutinesRaceOnAnEmptyCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	want := payload(t, 4096)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				got, _, err := Open(dir).Build(NewKey("shared", fmt.Sprint(i%5)), func() ([]byte, error) { return want, nil })
				if err != nil || string(got) != string(want) {
					t.Errorf("got %v, %d bytes", err, len(got))
					return
				}
			}
		}()
	}
	wg.Wait()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 5, "one entry per key, no temporary files")
}

// A new cache directory is created 0700 (parents too).
func TestNewDirectoryIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "metalcore")
	c := Open(dir)
	require.True(t, c.Enabled(), c.Disabled())
	for _, d := range []string{dir, filepath.Dir(dir)} {
		info, err := os.Stat(d)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), info.Mode().Perm(), d)
	}
}

// A directory others could write is not used: nothing is read from it or
// written to it, and Disabled says why.
func TestDirectoryOthersMayWriteIsRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o770, 0o722, 0o1777} {
		dir := filepath.Join(t.TempDir(), "shared")
		good := Open(dir)
		require.NoError(t, good.Put(NewKey("k"), []byte("planted")))
		require.NoError(t, os.Chmod(dir, mode))
		c := Open(dir)
		require.False(t, c.Enabled(), "mode %o", mode)
		require.Contains(t, c.Disabled(), "group or others may write")
		var calls atomic.Int32
		got, src, err := c.Build(NewKey("k"), counting([]byte("fresh"), &calls))
		require.NoError(t, err)
		require.Equal(t, []byte("fresh"), got)
		require.Equal(t, Compiled, src)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1, "nothing written to a refused directory")
	}
}

// A directory or an entry another user owns is not used (as root, which
// CI is, the test gives them to user 65534; as anyone else chown fails and
// the test says so).
func TestAnotherUsersDirectoryAndEntriesAreRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	dir := filepath.Join(t.TempDir(), "theirs")
	c := Open(dir)
	require.NoError(t, c.Put(NewKey("k"), []byte("planted")))
	require.NoError(t, os.Chown(c.Path(NewKey("k")), 65534, 65534))
	_, ok := c.Get(NewKey("k"))
	require.False(t, ok, "an entry another user owns is a miss")

	require.NoError(t, os.Chown(dir, 65534, 65534))
	other := Open(dir)
	require.False(t, other.Enabled())
	require.Contains(t, other.Disabled(), "owned by user 65534")
}

// An entry larger than MaxEntry is a miss, found from its size without
// reading it (a sparse file: reading it whole would take its full size in
// memory).
func TestOversizedEntryIsNotRead(t *testing.T) {
	c := Open(t.TempDir())
	k := NewKey("k")
	require.NoError(t, c.Put(k, []byte("small")))
	require.NoError(t, os.Truncate(c.Path(k), 512<<20))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, ok := c.Get(k)
	runtime.ReadMemStats(&after)
	require.False(t, ok)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated reading the entry")
	require.Error(t, c.Put(NewKey("big"), make([]byte, MaxEntry)))
}

// A symlink or a directory in an entry's place is a miss.
func TestEntryThatIsNotARegularFileIsAMiss(t *testing.T) {
	c := Open(t.TempDir())
	k := NewKey("k")
	require.NoError(t, os.Mkdir(c.Path(k), 0o700))
	_, ok := c.Get(k)
	require.False(t, ok)
}
