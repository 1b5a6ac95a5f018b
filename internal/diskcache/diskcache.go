// Package diskcache keeps compiled kernel images on disk between processes,
// so that only the first process on a machine pays for compiling them.
//
// An entry is one file named by its key's hash, holding a header (magic,
// the key's hash, the payload's size and SHA-256) and the payload. Writes go
// to a temporary file in the same directory, renamed into place, so readers
// see a whole entry or none and several processes may fill one directory at
// once. Anything that does not verify — truncated, corrupt, another key's,
// another format's — is a miss, never a payload. A directory that cannot be
// created or written means no caching, never an error for the caller.
//
// The SHA-256 in an entry guards against damage, not against an attacker:
// whoever can write the directory can write an entry that verifies. So the
// cache is used only where no one else can write: a directory this user
// owns that neither group nor others may write (created 0700), holding
// regular files this user owns. Anything else means no caching (Disabled
// says why). An entry is read only up to MaxEntry bytes, after checking
// its size.
package diskcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// MaxEntry bounds an entry's size (header and image); the largest kernel
// image is a few hundred kilobytes.
const MaxEntry = 64 << 20

// Env is the variable naming the cache directory; Off as its value turns
// the cache off.
const (
	Env = "MC_CACHE_DIR"
	Off = "off"
)

var magic = [8]byte{'m', 'c', 'c', 'a', 'c', 'h', 'e', '1'}

const headerSize = len(magic) + sha256.Size + 8 + sha256.Size

// Dir is where the cache lives: $MC_CACHE_DIR, else $XDG_CACHE_HOME/metalcore,
// else $HOME/.cache/metalcore; "" when MC_CACHE_DIR is "off" or nothing
// names a place.
func Dir() string {
	if d := os.Getenv(Env); d != "" {
		if d == Off {
			return ""
		}
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "metalcore")
	}
	if d := os.Getenv("HOME"); d != "" {
		return filepath.Join(d, ".cache", "metalcore")
	}
	return ""
}

// Key is the hash of parts, each length-prefixed so that no two lists of
// parts give the same key.
type Key [sha256.Size]byte

// NewKey hashes every component that changes what is cached.
func NewKey(parts ...string) Key {
	h := sha256.New()
	for _, p := range parts {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var k Key
	h.Sum(k[:0])
	return k
}

func (k Key) String() string { return hex.EncodeToString(k[:]) }

// Cache is a directory of entries; the zero Cache (no directory) caches
// nothing.
type Cache struct {
	dir      string
	disabled string // why a named directory is not used
}

// Open is the cache in dir ("" for none): created 0700 where it does not
// exist, and refused (no caching; Disabled says why) where it is not a
// directory this user owns, or group or others may write it.
func Open(dir string) Cache {
	if dir == "" {
		return Cache{}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Cache{disabled: fmt.Sprintf("cache directory %s cannot be created: %v", dir, err)}
	}
	info, err := os.Stat(dir)
	if err != nil {
		return Cache{disabled: fmt.Sprintf("cache directory %s: %v", dir, err)}
	}
	if why := unsafeToUse(info, true); why != "" {
		return Cache{disabled: fmt.Sprintf("cache directory %s is not used: %s", dir, why)}
	}
	return Cache{dir: dir}
}

// unsafeToUse says why a directory (or an entry, dir false) could hold
// another user's data, or "".
func unsafeToUse(info fs.FileInfo, dir bool) string {
	switch {
	case dir && !info.IsDir():
		return "not a directory"
	case !dir && !info.Mode().IsRegular():
		return "not a regular file"
	case dir && info.Mode().Perm()&0o022 != 0:
		return fmt.Sprintf("group or others may write it (mode %04o)", info.Mode().Perm())
	}
	if uid, ok := owner(info); ok && uid != os.Getuid() {
		return fmt.Sprintf("owned by user %d, not by this user (%d)", uid, os.Getuid())
	}
	return ""
}

// Enabled reports whether the cache has a directory.
func (c Cache) Enabled() bool { return c.dir != "" }

// Disabled says why a directory that was named is not used ("" when it is,
// or when none was named).
func (c Cache) Disabled() string { return c.disabled }

// Path is the file of key's entry.
func (c Cache) Path(k Key) string { return filepath.Join(c.dir, k.String()+".bin") }

// Get is key's payload, or false when there is no entry that verifies.
func (c Cache) Get(k Key) ([]byte, bool) {
	if c.dir == "" {
		return nil, false
	}
	b, err := readEntry(c.Path(k))
	if err != nil || len(b) < headerSize {
		return nil, false
	}
	h, payload := b[:headerSize], b[headerSize:]
	if !bytes.Equal(h[:len(magic)], magic[:]) || !bytes.Equal(h[len(magic):len(magic)+sha256.Size], k[:]) {
		return nil, false
	}
	size := binary.LittleEndian.Uint64(h[len(magic)+sha256.Size:])
	sum := sha256.Sum256(payload)
	if size != uint64(len(payload)) || !bytes.Equal(h[headerSize-sha256.Size:], sum[:]) {
		return nil, false
	}
	return payload, true
}

// readEntry reads a regular file this user owns of at most MaxEntry bytes.
func readEntry(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if why := unsafeToUse(info, false); why != "" {
		return nil, errors.New(why)
	}
	if info.Size() > MaxEntry {
		return nil, fmt.Errorf("%d bytes, over %d", info.Size(), MaxEntry)
	}
	b := make([]byte, info.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Put stores payload under key, atomically: a temporary file renamed over
// the entry. Its error is for tests and diagnostics; callers go on without
// the cache.
func (c Cache) Put(k Key, payload []byte) error {
	if c.dir == "" {
		return errors.New("no cache directory")
	}
	if headerSize+len(payload) > MaxEntry {
		return fmt.Errorf("entry of %d bytes, over %d", headerSize+len(payload), MaxEntry)
	}
	f, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename there is nothing left to remove
	sum := sha256.Sum256(payload)
	h := make([]byte, 0, headerSize)
	h = append(h, magic[:]...)
	h = append(h, k[:]...)
	h = binary.LittleEndian.AppendUint64(h, uint64(len(payload)))
	h = append(h, sum[:]...)
	_, err = f.Write(append(h, payload...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), c.Path(k))
}

// Source says where Build's payload came from.
type Source string

const (
	Hit      Source = "cache"
	Compiled Source = "compiled"
)

// Build is key's payload from the cache, else from make (then stored, if
// the cache can take it).
func (c Cache) Build(k Key, make func() ([]byte, error)) ([]byte, Source, error) {
	if b, ok := c.Get(k); ok {
		return b, Hit, nil
	}
	b, err := make()
	if err != nil {
		return nil, Compiled, err
	}
	if c.dir != "" {
		_ = c.Put(k, b) // a cache that cannot be written is no cache, not a failure
	}
	return b, Compiled, nil
}
