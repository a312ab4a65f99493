package api

import (
	"sync"
	"time"
)

// keyCacheTTL is how long a chat request may skip the key lookup after the
// key was last seen active. Chat is safe to serve from the cache because
// Admit checks the key again in the same transaction as the debit: a
// revoked key is refused there, and evicted. Every other route reads the
// key from the store on each request.
const keyCacheTTL = time.Minute

// keyCacheMax bounds the cache; when full it is emptied (a miss costs one
// read).
const keyCacheMax = 100_000

// keyCache maps an API key's hash to its account, for chat requests.
type keyCache struct {
	mu sync.Mutex
	m  map[string]cachedKey
}

type cachedKey struct {
	account string
	until   time.Time
}

func (c *keyCache) get(hash string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.m[hash]
	if !ok || now.After(k.until) {
		return "", false
	}
	return k.account, true
}

func (c *keyCache) put(hash, account string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= keyCacheMax {
		c.m = map[string]cachedKey{}
	}
	c.m[hash] = cachedKey{account: account, until: now.Add(keyCacheTTL)}
}

func (c *keyCache) evict(hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, hash)
}
