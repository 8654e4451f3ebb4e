// Files that must be complete when the process ends: the C API's allocators
// live until exit (frees may come from other libraries' static destructors),
// so the recorders they own finish their files from an exit handler.
#pragma once

namespace memlake {

class ClosesAtExit {
 public:
  // Finishes the file; later calls do nothing. Runs on the exiting thread.
  virtual void close_at_exit() = 0;

 protected:
  ~ClosesAtExit() = default;
};

// Called by each recorder from its constructor and destructor. The first
// registration installs the exit handler.
void close_at_exit_register(ClosesAtExit* c);
void close_at_exit_unregister(ClosesAtExit* c);

}  // namespace memlake
