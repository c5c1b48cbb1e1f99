package consumequeue

// FileBytes is the size of the queue's files (each preallocated to the
// configured file size), 0 before it has one.
func (q *Queue) FileBytes() int64 {
	files := q.files.Load()
	if files == nil {
		return 0
	}
	return int64(files.Len()) * q.fileSizeBytes
}
