//go:build !amd64

package quant

const haveAVX2 = false

func dotQ8_0Vec(row []byte, a *Act) (float32, bool) { return 0, false }

func q8_0Tiles(row []byte, acts []Act, out []float32) int { return 0 }

func q8_0TileRows(rows []byte, rowBytes int, acts []Act, out []float32) bool { return false }

func q4KVec(row []byte, a *Act, lanes *[8]float32) (float32, bool) { return 0, false }

func q6KVec(row []byte, a *Act, lanes *[8]float32) bool { return false }

func dotF32Vec(w, x []float32) (float64, int) { return 0, 0 }

func dotF16Vec(w []uint16, x []float32) (float64, int) { return 0, 0 }

// haveKTiles is a variable as on amd64, so tests can switch it.
var haveKTiles = false

func kTiles(row []byte, acts []Act, out []float32) int { return 0 }

func kTileRows(rows []byte, rowBytes int, acts []Act, out []float32) bool { return false }

func quantizeQ8KVec(x []float32, q []int8, d []float32, sums []int16) bool { return false }

func quantizeQ8_0Vec(x []float32, q []int8, d []float32) bool { return false }

func kRows(rows []byte, rowBytes int, a *Act, out []float32) bool { return false }

var haveRowsAVX512 = false
