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
