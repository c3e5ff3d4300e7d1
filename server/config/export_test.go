package config

// LoadWithTokenFiles is [Load] with token files checked by canOpen instead
// of on this machine: a nil error means the file can be read. It lets a
// test load a file whose token_file paths exist only where it is deployed.
func LoadWithTokenFiles(path string, canOpen func(path string) error) (*Config, Problems, error) {
	return loadFile(path, canOpen)
}
