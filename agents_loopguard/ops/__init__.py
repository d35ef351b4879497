"""What operators do, framework-free: decide approval pauses (:mod:`.approvals`), reconcile and recover
(:mod:`.recovery`), stop tasks and run stop hooks (:mod:`.stops`), bound trigger chains (:mod:`.triggers`), and the
views the command line and the server show (:mod:`.operator`). Everything here goes through the store."""
