;;;; prelude.lisp --- what every start and every cache build of a local
;;;; image loads first, before Swank.
;;;;
;;;; Written in ASCII on purpose: it is read before the encodings are set.
;;;; Owned by the image supervisor (crates/cl-mcp-server/src/image/); the
;;;; generated scripts of core_cache/scripts.rs load it, then Swank, the helpers and
;;;; boot.lisp.
;;;;
;;;; - The boot guard: until BOOT.LISP's MAIN takes over, an error nobody
;;;;   handles prints what went wrong (the condition, the file being loaded
;;;;   or compiled) and ends the process with exit code 3. No Lisp waits in
;;;;   its debugger on a standard input the server holds open, so a start
;;;;   that fails, fails in a moment and says why.
;;;; - UTF-8: Swank, the helpers and the user's files are read as UTF-8
;;;;   whatever the environment's locale (an MCP client may start the
;;;;   server with no LANG at all).
;;;; - Swank's compiled files go to the server's own cache directory, each
;;;;   written under a temporary name and renamed into place, so a process
;;;;   killed at any instant leaves no half-written fasl behind.
;;;; - The cache check: a built cache is only kept once an image started
;;;;   from it has found Swank, the helpers and MAIN in place.
;;;; - ABCL: what Swank's ABCL backend requires is loaded here, with
;;;;   CL-USER current (see REQUIRE-SWANK-BACKEND-MODULES).

(defpackage #:cl-mcp-boot
  (:use #:common-lisp)
  (:export #:main #:*swank-port* #:*utf-8* #:utf-8-defaults #:load-helper
           #:compile-and-load #:use-private-swank-fasls #:use-swank-sources
           #:check-cache #:guarded-load))

(in-package #:cl-mcp-boot)

(defun getenv (name)
  #+sbcl (sb-ext:posix-getenv name)
  #+ecl (ext:getenv name)
  #+clisp (ext:getenv name)
  #+ccl (ccl:getenv name)
  #+abcl (ext:getenv name)
  #-(or sbcl ecl clisp ccl abcl) (progn name nil))

(defun exit-now (code)
  "End the process at once, whatever its other threads are doing."
  #+sbcl (sb-ext:exit :code code :abort t)
  ;; ECL's QUIT kills and then joins every other thread by default: one
  ;; that does not take the interrupt (inside WITHOUT-INTERRUPTS, or one
  ;; that missed it going to sleep) would keep the image alive for as long
  ;; as it runs, after the server is gone.
  #+ecl (ext:quit code nil)
  #+clisp (ext:quit code)
  #+ccl (ccl:quit code)
  #+abcl (ext:exit :status code)
  #-(or sbcl ecl clisp ccl abcl) (progn code (error "no exit on this Lisp")))

(defparameter *utf-8* #+clisp charset:utf-8 #-clisp :utf-8
  "This Lisp's name for the UTF-8 external format.")

;;; The boot guard.

(defvar *booting* t
  "True until MAIN takes over: an unhandled error ends the process.")

(defvar *process-stderr* nil)

(defun process-stderr ()
  "The process's own standard error, which the server keeps the last lines
of (CLISP's *ERROR-OUTPUT* writes to standard output)."
  (or *process-stderr*
      (setf *process-stderr*
            (or #+sbcl sb-sys:*stderr*
                #+clisp (ignore-errors (ext:make-stream :error))
                *error-output*))))

(defun safe-text (thing)
  "THING printed with ~A, or a description when printing it fails."
  (handler-case (princ-to-string thing)
    (error () (format nil "a ~S (which does not print)" (type-of thing)))))

(defun boot-failure (condition hook)
  "The debugger hook of the boot: say what failed and where, then exit 3."
  (declare (ignore hook))
  (ignore-errors
   (let ((out (process-stderr)))
     (format out "~&cl-mcp-boot: ~A: ~A~@[ (while compiling ~A)~]~@[ (while loading ~A)~]~%"
             (type-of condition) (safe-text condition)
             (and *compile-file-truename* (safe-text *compile-file-truename*))
             (and *load-truename* (safe-text *load-truename*)))
     (finish-output out)))
  (exit-now 3))

(setf *debugger-hook* 'boot-failure)

(defun guarded-load (file)
  "Load FILE (a generated start or build script) so that an error nothing
handles ends the process with BOOT-FAILURE's report, before any Lisp's own
batch-mode handling (CLISP's -on-error abort reports to standard output and
then fails to find its restart) or debugger gets it."
  (handler-bind ((error (lambda (c)
                          (when *booting*
                            (boot-failure c nil)))))
    (load file :external-format *utf-8*)))

(defun end-boot-guard ()
  "From here on errors go to Swank's debugger, as in any Swank image."
  (setf *booting* nil)
  (when (eq *debugger-hook* 'boot-failure)
    (setf *debugger-hook* nil)))

;;; UTF-8 whatever the locale.

(defun utf-8-defaults ()
  "Make UTF-8 the default encoding of files (the helpers, the user's
sources, COMPILE-FILE and LOAD without :EXTERNAL-FORMAT). Run at every
start: some Lisps compute their defaults from the locale at start-up."
  #+sbcl (setf sb-impl::*default-external-format* :utf-8)
  #+ecl (setf ext:*default-external-format* :utf-8)
  #+clisp (setf custom:*default-file-encoding* charset:utf-8
                custom:*misc-encoding* charset:utf-8)
  #+ccl (setf ccl:*default-external-format* :utf-8)
  ;; ABCL has no such variable: the JVM's default charset applies, UTF-8
  ;; since Java 18 whatever the locale.
  nil)

(utf-8-defaults)

;;; ABCL: what Swank's backend requires, with CL-USER current.

#+abcl
(defparameter *backend-module-directory*
  (and *load-truename*
       (make-pathname :directory (append (pathname-directory *load-truename*)
                                         '("abcl-modules"))
                      :name nil :type nil :version nil :defaults *load-truename*))
  "Where a fasl cache entry keeps JSS and ABCL-INTROSPECT compiled (beside
this file, written by COMPILE-SWANK-BACKEND-MODULES); absent elsewhere.")

#+abcl
(defvar *deferred-fset-hooks* '()
  "ABCL-INTROSPECT's FSET hooks, held back while the start loads Swank and
the helpers (see LOAD-COMPILED-BACKEND-MODULES).")

#+abcl
(defvar *annotation-thread* nil
  "The thread annotating the image's functions for ABCL-INTROSPECT after the
start (see FINISH-BACKEND-MODULES), or NIL.")

#+abcl
(defun backend-module-fasls ()
  "The compiled JSS and ABCL-INTROSPECT files of this cache entry, in load
order (their names start with their position), or NIL."
  (let ((dir *backend-module-directory*))
    (and dir (probe-file dir)
         (sort (directory (merge-pathnames "*.abcl" dir)) #'string<
               :key #'file-namestring))))

#+abcl
(defun load-compiled-backend-modules (fasls)
  "Load JSS and ABCL-INTROSPECT from FASLS, compiled into this cache entry,
without ASDF's planning (the jar's systems found, their .asd files loaded,
every file's date checked: seconds on ABCL), and tell ASDF they are loaded.
ABCL-INTROSPECT installs an FSET hook that, at the next definition, walks
every function of the image by reflection (seconds) and then annotates each
new definition: held back here, so the start loads Swank and the helpers
without it; FINISH-BACKEND-MODULES puts it back and walks once, after the
start."
  (dolist (fasl fasls)
    (load fasl)
    (defer-jss-auto-imports)
    (let ((hook (find-symbol "FSET-HOOK-ANNOTATE-INTERNAL-FUNCTION" "SYSTEM")))
      (when (and hook (member hook sys::*fset-hooks*))
        (pushnew hook *deferred-fset-hooks*)
        (setf sys::*fset-hooks* (remove hook sys::*fset-hooks*)))))
  (let ((immutable (find-symbol "REGISTER-IMMUTABLE-SYSTEM" "ASDF")))
    (when (and immutable (fboundp immutable))
      (dolist (system '("jss" "abcl-introspect"))
        (funcall immutable system)))))

#+abcl
(defvar *jss-imports-deferred* nil
  "True when this start loaded JSS without its auto-imports (see
DEFER-JSS-AUTO-IMPORTS) and FINISH-BACKEND-MODULES has not yet taken them
over.")

#+abcl
(defvar *jss-imports-done* nil
  "True once the deferred JSS auto-imports are made (or failed).")

#+abcl
(defvar *jss-imports-lock* (threads:make-mutex)
  "Held while the deferred JSS auto-imports are made: by the deferred
thread, or by a lookup that found that thread gone.")

#+abcl
(defvar *imports-now* nil
  "Set by a JSS lookup waiting for the deferred auto-imports: make them
without waiting for *ANNOTATION-DELAY* to pass (the annotations still
wait for it).")

#+abcl
(defun wait-until (predicate seconds &optional (step 0.01))
  "Call PREDICATE every STEP seconds until it returns true or SECONDS have
passed; its last value."
  (let ((deadline (+ (get-internal-real-time)
                     (* seconds internal-time-units-per-second))))
    (loop (let ((done (funcall predicate)))
            (when (or done (>= (get-internal-real-time) deadline))
              (return done)))
          (sleep step))))

#+abcl
(defun defer-jss-auto-imports ()
  "Called after each of JSS's files loads: once JSS's package exists and
before its invoke.lisp runs, hold back its auto-imports. Loading JSS
walks every class of the JVM's modules by reflection to fill its table of
short class names (JSS:*DO-AUTO-IMPORTS*, about a second on this kind of
machine); only a short Java class name in JSS code reads that table
((JSS:NEW 'ARRAYLIST), JSS:FIND-JAVA-CLASS). FINISH-BACKEND-MODULES makes
the imports after the start, and a lookup before they are made waits for
them (WAIT-FOR-JSS-IMPORTS-AROUND)."
  (let* ((package (find-package "JSS"))
         (flag (and package (find-symbol "*DO-AUTO-IMPORTS*" package))))
    (when (and flag (not (boundp flag)) (not *jss-imports-deferred*))
      (proclaim (list 'special flag))
      (setf (symbol-value flag) nil
            *jss-imports-deferred* t))))

#+abcl
(defun await-jss-imports ()
  "Wait until the deferred JSS auto-imports are made (at most a minute),
asking the deferred thread to make them at once; when that thread is gone
(killed, or it never started), make them here."
  (unless *jss-imports-done*
    (setf *imports-now* t)
    (wait-until (lambda ()
                  (let ((thread *annotation-thread*))
                    (unless (and thread (threads:thread-alive-p thread))
                      (make-deferred-jss-imports)))
                  *jss-imports-done*)
                60)))

#+abcl
(defvar *jss-lookup-wrappers* '()
  "(SYMBOL ORIGINAL WRAPPER) of JSS's lookups that wait for the deferred
auto-imports, put back once they are made.")

#+abcl
(defun wait-for-jss-imports-around (symbol)
  "Make JSS's function SYMBOL wait for the deferred auto-imports before it
reads their table; MAKE-DEFERRED-JSS-IMPORTS puts the original back.
SYMBOL-FUNCTION, not FDEFINITION: ABCL's FSET would record a new source
location (and warn of a redefinition) each time."
  (when (and symbol (fboundp symbol) (not (macro-function symbol)))
    (let* ((original (symbol-function symbol))
           (wrapper (lambda (&rest arguments)
                      (await-jss-imports)
                      (apply original arguments))))
      (push (list symbol original wrapper) *jss-lookup-wrappers*)
      (setf (symbol-function symbol) wrapper))))

#+abcl
(defun make-deferred-jss-imports ()
  "The auto-imports JSS's load would have made, then JSS as it is after a
plain load: the flag true again, its lookups unwrapped (a lookup the user
has redefined meanwhile is left as it is). Once, whoever calls it."
  (threads:with-mutex (*jss-imports-lock*)
    (unless *jss-imports-done*
      (unwind-protect
           (let ((flag (find-symbol "*DO-AUTO-IMPORTS*" "JSS"))
                 (import (find-symbol "DO-AUTO-IMPORTS" "JSS")))
             (handler-case
                 (when (and import (fboundp import))
                   (funcall import))
               (serious-condition () nil))
             (when flag
               (setf (symbol-value flag) t)))
        (setf *jss-imports-done* t)
        (dolist (entry *jss-lookup-wrappers*)
          (destructuring-bind (symbol original wrapper) entry
            (when (and (fboundp symbol) (eq (symbol-function symbol) wrapper))
              (setf (symbol-function symbol) original))))
        (setf *jss-lookup-wrappers* '())))))

#+abcl
(defun require-swank-backend-modules ()
  "Load what Swank's ABCL backend requires (ABCL-CONTRIB, then JSS and
ABCL-INTROSPECT) with CL-USER the current package: from this cache entry's
compiled files when it has them, else through ASDF. ASDF compiles them
into the user's shared ASDF cache, and a fasl ABCL compiles records
the package current then: compiled while Swank's backend loads (its own
REQUIRE), they named SWANK/ABCL, which a plain ABCL loading them lacks
(\"The name SWANK/ABCL does not designate any package\"); and from there,
with a fresh ASDF cache, ABCL-INTROSPECT failed to load. The backend then
finds them loaded. A failure here leaves the backend to try as it always
did (it treats ABCL-INTROSPECT as optional)."
  (let ((*package* (find-package "COMMON-LISP-USER")))
    (ignore-errors
     (require "ASDF")
     (require "ABCL-CONTRIB")
     (let ((fasls (backend-module-fasls)))
       (when fasls
         (handler-case (load-compiled-backend-modules fasls)
           (error (e)
             (let ((out (process-stderr)))
               (format out "~&cl-mcp: the cached JSS and ABCL-INTROSPECT failed to load (~A); loading them through ASDF~%"
                       (safe-text e))
               (finish-output out))))))
     (require "ABCL-INTROSPECT"))))

#+abcl
(require-swank-backend-modules)

#+abcl
(defun asdf-call (name &rest args)
  "Call ASDF's function NAME (ASDF is loaded after this file is read)."
  (apply (find-symbol name "ASDF") args))

#+abcl
(defun system-source-files (name)
  "The source files of ASDF system NAME and of the systems it depends on,
dependencies first, each system's in the order of its definition (the
order ASDF loads JSS's and ABCL-INTROSPECT's in), as (SYSTEM FILE PATHNAME)."
  (let ((seen '())
        (files '()))
    (labels ((walk (component system)
               (cond ((typep component (find-symbol "CL-SOURCE-FILE" "ASDF"))
                      (push (list system (asdf-call "COMPONENT-NAME" component)
                                  (asdf-call "COMPONENT-PATHNAME" component))
                            files))
                     ((typep component (find-symbol "PARENT-COMPONENT" "ASDF"))
                      (dolist (child (asdf-call "COMPONENT-CHILDREN" component))
                        (walk child system)))))
             (visit (name)
               (unless (member name seen :test #'string-equal)
                 (push name seen)
                 (let ((system (asdf-call "FIND-SYSTEM" name)))
                   (dolist (dependency (asdf-call "SYSTEM-DEPENDS-ON" system))
                     (when (or (stringp dependency) (symbolp dependency))
                       (visit (string-downcase (string dependency)))))
                   (walk system (asdf-call "COMPONENT-NAME" system))))))
      (visit name))
    (nreverse files)))

#+abcl
(defun compile-swank-backend-modules (directory)
  "A cache build: compile the source files of ABCL-INTROSPECT and what it
depends on (JSS), in load order, into DIRECTORY's abcl-modules/ as
NN-SYSTEM-FILE.abcl, with CL-USER current. REQUIRE-SWANK-BACKEND-MODULES
has loaded them through ASDF already; when that failed, each is loaded once
compiled, as ASDF would (a later file uses an earlier one's reader macros).
Nothing is written when ASDF does not know ABCL-INTROSPECT: the start then
loads it through ASDF as before."
  (when (and (find-package "ASDF")
             (asdf-call "FIND-SYSTEM" "abcl-introspect" nil))
    (let ((out (merge-pathnames (make-pathname :directory '(:relative "abcl-modules"))
                                directory))
          (loaded (find "ABCL-INTROSPECT" *modules* :test #'string-equal))
          (*package* (find-package "COMMON-LISP-USER"))
          (i 0))
      (dolist (file (system-source-files "abcl-introspect"))
        (destructuring-bind (system name source) file
          (let ((fasl (compile-atomically
                       source
                       (merge-pathnames
                        (make-pathname :name (format nil "~2,'0D-~A-~A" i system name)
                                       :type "abcl")
                        out))))
            (unless loaded
              (load fasl)))
          (incf i))))))

#+abcl
(defparameter *annotation-delay* 2
  "Seconds after the start before the deferred work (JSS's auto-imports,
ABCL-INTROSPECT's annotations) is done: on the JVM's few cores it would
slow the start's first request (its first use of ABCL's compiler took 5 s
instead of 2 beside the annotations, under load), which usually arrives
at once.")

#+abcl
(defvar *annotate-now* nil
  "Set by AWAIT-BACKEND-ANNOTATIONS: do the deferred work without waiting
for *ANNOTATION-DELAY* to pass.")

#+abcl
(defun finish-backend-modules ()
  "After the start, before Swank serves anyone: put back the FSET hooks
LOAD-COMPILED-BACKEND-MODULES held back, each new definition annotated by
them from now on, make JSS's lookups wait for its deferred auto-imports
(DEFER-JSS-AUTO-IMPORTS), and on a thread of its own, *ANNOTATION-DELAY*
seconds later (the imports sooner when a lookup asks), make those imports,
then let ABCL-INTROSPECT annotate every function of the image once: what
it does at the first definition after it loads (its backlog), done here
so no definition (the first request's) waits for it."
  (when (or *deferred-fset-hooks* *jss-imports-deferred*)
    (let ((hooks *deferred-fset-hooks*)
          (imports *jss-imports-deferred*)
          (backlog (find-symbol "*ANNOTATE-FUNCTION-BACKLOG?*" "SYSTEM"))
          (start (get-internal-real-time)))
      (setf *deferred-fset-hooks* '()
            *jss-imports-deferred* nil)
      (when (and hooks backlog)
        (setf (symbol-value backlog) nil))
      (dolist (hook hooks)
        (pushnew hook sys::*fset-hooks*))
      (flet ((delay-over-p ()
               (> (- (get-internal-real-time) start)
                  (* *annotation-delay* internal-time-units-per-second))))
        (setf *annotation-thread*
              (threads:make-thread
               (lambda ()
                 (when imports
                   (wait-until (lambda () (or *annotate-now* *imports-now* (delay-over-p)))
                               *annotation-delay* 0.05)
                   (make-deferred-jss-imports))
                 (when hooks
                   (wait-until (lambda () (or *annotate-now* (delay-over-p)))
                               *annotation-delay* 0.05)
                   ;; The backlog flag bound true on this thread only: the
                   ;; hook walks everything here, and definitions elsewhere
                   ;; go on annotating themselves alone.
                   (handler-case
                       (progv (and backlog (list backlog)) (and backlog (list t))
                         (dolist (hook hooks)
                           (funcall hook 'finish-backend-modules #'finish-backend-modules)))
                     (serious-condition () nil))))
               :name "cl-mcp abcl deferred start work")))
      ;; After the thread exists: a lookup finding no thread alive makes
      ;; the imports itself (AWAIT-JSS-IMPORTS).
      (if imports
          (dolist (name '("LOOKUP-CLASS-NAME" "JAPROPOS"))
            (wait-for-jss-imports-around (find-symbol name "JSS")))
          (setf *jss-imports-done* t)))))

#+abcl
(defun await-backend-annotations (&optional (seconds 30))
  "Do FINISH-BACKEND-MODULES's deferred work now if it is still to come,
and wait for it (at most SECONDS): the debugger names local functions and
hides Swank's frames by the annotations."
  (let ((thread *annotation-thread*))
    (when thread
      (setf *annotate-now* t)
      (when (wait-until (lambda () (not (threads:thread-alive-p thread))) seconds)
        (setf *annotation-thread* nil)))))

;;; Files written whole or not at all.

(defun temporary-sibling (path)
  "A name beside PATH for writing it, unique to this process. (On ABCL a
compiled file's classes are named after it: impl-abcl.lisp's
HELPER-CLASS-PREFIXES finds the helpers' by its -tmp.)"
  (make-pathname :name (format nil "~A-tmp~36R" (pathname-name path)
                               (random (expt 2 48) (make-random-state t)))
                 :defaults path))

(defun compile-atomically (source output &key verbose)
  "Compile SOURCE to OUTPUT through a temporary file renamed into place, so
no reader ever finds half a fasl at OUTPUT."
  (ensure-directories-exist output)
  (let ((tmp (temporary-sibling output)))
    (unwind-protect
         (let ((fasl (compile-file source :output-file tmp :external-format *utf-8*
                                          :verbose verbose :print nil)))
           (unless fasl
             (error "~A does not compile" (safe-text source)))
           (when (probe-file output)
             (delete-file output))
           (rename-file fasl output))
      (when (probe-file tmp)
        (ignore-errors (delete-file tmp))))
    output))

(defun compile-and-load (source output)
  "Compile SOURCE to OUTPUT (atomically) and load the fasl."
  (load (compile-atomically source output)))

(defun load-helper (file &key strict)
  "Load a helper source file as UTF-8. A failure is an error when STRICT (a
cache build: a broken helper must never be cached); otherwise it is reported
on standard error and the start goes on without it."
  (if strict
      (load file :external-format *utf-8*)
      (handler-case (load file :external-format *utf-8*)
        (error (e)
          (let ((out (process-stderr)))
            (format out "~&cl-mcp: helper ~A failed to load: ~A: ~A~%"
                    (safe-text file) (type-of e) (safe-text e))
            (finish-output out))))))

;;; Swank's fasls in the server's own cache.

(defun private-binary-pathname (source directory)
  "Where Swank's SOURCE is compiled: DIRECTORY, the server's private cache
(Debian's loader asks ASDF's output translations instead, which name a
directory shared with every other program of the user)."
  (merge-pathnames (make-pathname :name (pathname-name source)
                                  :type (pathname-type (compile-file-pathname source)))
                   directory))

(defun compile-files-atomically (files directory load quiet)
  "Swank loader's COMPILE-FILES, writing each fasl atomically: FILES are
compiled when their fasl is missing or older, or a file before them was
compiled; loaded when LOAD."
  (let ((again nil))
    (dolist (source files)
      (let ((fasl (private-binary-pathname source directory)))
        (when (or again
                  (not (probe-file fasl))
                  (> (file-write-date source) (file-write-date fasl)))
          (setf again t)
          (compile-atomically source fasl :verbose (not quiet)))
        (when load
          (load fasl))))))

(defun use-private-swank-fasls (directory)
  "Point the loaded swank-loader at DIRECTORY for Swank's compiled files,
written atomically. Does nothing where no swank-loader is loaded (Swank
from ASDF or Quicklisp, whose compiler output is ASDF's)."
  (let ((loader (find-package "SWANK-LOADER")))
    (when loader
      (let ((var (find-symbol "*FASL-DIRECTORY*" loader))
            (binary (find-symbol "BINARY-PATHNAME" loader))
            (compile (find-symbol "COMPILE-FILES" loader)))
        (when var
          (setf (symbol-value var) directory))
        (when (and binary (fboundp binary))
          (setf (fdefinition binary) #'private-binary-pathname))
        (when (and compile (fboundp compile))
          (setf (fdefinition compile) #'compile-files-atomically))))))

;;; Swank from its sources, compiling nothing.

(defun load-sources (files directory load quiet)
  "Swank loader's COMPILE-FILES for USE-SWANK-SOURCES: LOAD each source
file as it is (ECL evaluates it through its bytecode compiler, in a moment,
where COMPILE-FILE goes through a C compiler for minutes)."
  (declare (ignore directory quiet))
  (when load
    (dolist (source files)
      (load source :external-format *utf-8*))))

(defun use-swank-sources ()
  "Make the loaded swank-loader load Swank and its contribs from source,
compiling and writing nothing: an ECL image's first start, while its
compiled cache is built beside it (core_cache/background.rs)."
  (let* ((loader (find-package "SWANK-LOADER"))
         (compile (and loader (find-symbol "COMPILE-FILES" loader))))
    (when (and compile (fboundp compile))
      (setf (fdefinition compile) #'load-sources))))

;;; The cache check.

(defun check-cache ()
  "Signal an error unless Swank, every helper function and MAIN are in
this image."
  (unless (find-package "SWANK")
    (error "Swank is not loaded"))
  (let ((helpers (find-package "CL-MCP-SERVER"))
        (missing '()))
    (unless helpers
      (error "the helpers' package CL-MCP-SERVER is missing"))
    (do-external-symbols (s helpers)
      (unless (or (fboundp s) (boundp s))
        (push (symbol-name s) missing)))
    (when missing
      (error "helper functions are missing: ~{~A~^, ~}" (sort missing #'string<))))
  (unless (fboundp (find-symbol "MAIN" "CL-MCP-BOOT"))
    (error "boot.lisp's MAIN is missing"))
  t)
