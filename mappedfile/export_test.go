package mappedfile

// SetMaking sets the hook Open runs while it makes a new file's bytes.
func SetMaking(fs *MemFS, f func(path string)) { fs.making = f }
