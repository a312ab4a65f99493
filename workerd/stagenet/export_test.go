package stagenet

// WriteRaw writes b to the connection as it is, for tests that play a
// peer sending malformed frames.
func (c *Conn) WriteRaw(b []byte) error {
	c.wsem <- struct{}{}
	defer func() { <-c.wsem }()
	_, err := c.tc.Write(b)
	return err
}

// Certificate is the certificate a member presents, for tests that make
// their own TLS clients.
var Certificate = certificate

// PayloadWaiting is the number of payload bytes the connection's reader
// still awaits inside a frame (0 between frames), for tests that need to
// know the reader has taken a header and is blocked on its payload.
func (c *Conn) PayloadWaiting() int64 { return c.waiting.Load() }
