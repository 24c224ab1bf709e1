;;;; quicklisp-stand-in.lisp --- `ql:quickload` in every image.
;;;;
;;;; Code, READMEs and exercise files say (ql:quickload :fiveam) for a
;;;; library ASDF can load right there. Where Quicklisp is set up (loaded
;;;; into the core before these helpers) it is the real one and nothing
;;;; here runs. Where it is not, the image gets a QUICKLISP-CLIENT package
;;;; (nickname QL) whose QUICKLOAD, SYSTEM-APROPOS, WHERE-IS-SYSTEM and
;;;; REGISTER-LOCAL-PROJECTS are answered by ASDF.
;;;;
;;;; The stand-in must not stand in the way of the real Quicklisp loaded
;;;; later (its setup.lisp): the package holds only symbols Quicklisp
;;;; itself exports and uses no package (its DEFPACKAGE then adds its own
;;;; uses and shadowing imports without a conflict), QUICKLOAD is a generic
;;;; function with Quicklisp's lambda list (its DEFGENERIC and DEFMETHOD
;;;; replace ours; a plain function there would be an error), and the
;;;; implementations live in CL-MCP-SERVER. BUILD.LISP's
;;;; QUICKLISP-AVAILABLE-P tells the two apart by QL-DIST, which only the
;;;; real one has.

(in-package #:cl-mcp-server)

(eval-when (:compile-toplevel :load-toplevel :execute)
  (require "ASDF"))

(defparameter *quicklisp-stand-in-notice*
  "Quicklisp is not installed; `ql:quickload` loads through ASDF (systems ASDF can find: the project's, the source registry's)."
  "Told once, with the first use of the stand-in.")

(defvar *quicklisp-stand-in-told* nil)

(define-condition quickload-system-missing (error)
  ((name :initarg :name :reader quickload-system-missing-name))
  (:report (lambda (c s)
             (let ((name (quickload-system-missing-name c)))
               (format s "System ~S is nowhere: ASDF cannot find it (not under the project root, not in ASDF's source registry), and Quicklisp, which could download it, is not installed.~A Install it (e.g. a Debian cl-* package) or make its .asd findable, then quickload it again."
                       name (system-guess-clause name))))))

(defun tell-stand-in-once ()
  (unless *quicklisp-stand-in-told*
    (setf *quicklisp-stand-in-told* t)
    (note-image-notice *quicklisp-stand-in-notice*)))

(defun asdf-session-symbol (name)
  "NAME in ASDF/SESSION (ASDF 3.3 and later), or NIL."
  (let ((package (find-package "ASDF/SESSION")))
    (and package (find-symbol name package))))

(defun visiting-asdf-action-p ()
  "True inside an ASDF action (a file ASDF compiles or loads): an OPERATE
from here is the \"Deprecated recursive use of OPERATE\" ASDF warns about."
  (let* ((session-var (asdf-session-symbol "*ASDF-SESSION*"))
         (session (and session-var (boundp session-var) (symbol-value session-var)))
         (visiting (asdf-session-symbol "VISITING-ACTION-LIST")))
    (and session visiting (fboundp visiting)
         (ignore-errors (funcall visiting session))
         t)))

(defun call-in-own-asdf-session (thunk)
  "THUNK with a fresh ASDF session (ASDF's own WITH-ASDF-SESSION :OVERRIDE):
the system is planned and loaded on its own, not as a step of the
session visiting the file that asked for it."
  (let ((session-var (asdf-session-symbol "*ASDF-SESSION*")))
    (if session-var
        (progv (list session-var) (list nil) (funcall thunk))
        (funcall thunk))))

(defun stand-in-quickload (systems &key verbose silent)
  "Load SYSTEMS (a name or a list of names) through ASDF, as QL:QUICKLOAD
would without downloading (its warnings muffled unless VERBOSE, as
Quicklisp muffles them). At top level ASDF's LOAD-SYSTEM (which loads
nothing that is loaded and unchanged); inside an ASDF action a system
already loaded is left alone and one not yet loaded is loaded in its own
ASDF session. A system ASDF cannot find is a QUICKLOAD-SYSTEM-MISSING
error naming it. Returns SYSTEMS, as Quicklisp does."
  (tell-stand-in-once)
  (dolist (designator (if (listp systems) systems (list systems)))
    (let* ((name (asdf:coerce-name designator))
           (system (asdf:find-system name nil)))
      (unless system
        (error 'quickload-system-missing :name name))
      (flet ((load-it ()
               ;; As Quicklisp does unless VERBOSE: the library's own
               ;; compiler warnings are not the caller's (a file that
               ;; quickloads at compile time would fail for them), and
               ;; its compilation is a unit of its own.
               (let ((*standard-output* (if silent (make-broadcast-stream) *standard-output*)))
                 (if verbose
                     (asdf:load-system name :verbose t)
                     (let ((*compile-verbose* nil) (*compile-print* nil)
                           (*load-verbose* nil) (*load-print* nil))
                       (handler-bind ((warning #'muffle-warning))
                         (with-compilation-unit (:override t)
                           (asdf:load-system name))))))))
        (cond ((not (visiting-asdf-action-p)) (load-it))
              ((asdf:component-loaded-p system) nil)
              (t (call-in-own-asdf-session #'load-it))))))
  systems)

(defun stand-in-system-apropos (term)
  "Print and return the names of the systems ASDF knows or can find that
contain TERM."
  (tell-stand-in-once)
  (let ((found (sort (remove-if-not (lambda (n) (search (string term) n :test #'char-equal))
                                    (known-system-names))
                     #'string<)))
    (dolist (n found) (format t "~&~A~%" n))
    found))

(defun stand-in-where-is-system (name)
  "The directory of the system NAME's .asd, or NIL when ASDF cannot find it."
  (tell-stand-in-once)
  (let ((system (asdf:find-system (asdf:coerce-name name) nil)))
    (and system (asdf:system-source-directory system))))

(defun stand-in-register-local-projects ()
  "Read ASDF's source registry anew (new .asd files there become findable;
the project root's are found without it)."
  (tell-stand-in-once)
  (asdf:clear-source-registry)
  (asdf:initialize-source-registry)
  nil)

(defun install-quicklisp-stand-in ()
  "Make the QUICKLISP-CLIENT package (nickname QL) of the stand-in, unless
a package of that name (or nickname) exists: that is Quicklisp's, or the
user's own."
  (unless (or (find-package "QUICKLISP-CLIENT") (find-package "QL"))
    (let ((ql (make-package "QUICKLISP-CLIENT" :use '() :nicknames '("QL"))))
      (flet ((ql-symbol (name)
               (let ((s (intern name ql))) (export s ql) s)))
        (let ((quickload (ql-symbol "QUICKLOAD")))
          ;; Quicklisp's own lambda list, so its DEFGENERIC replaces ours.
          (ensure-generic-function
           quickload :lambda-list '(systems &key verbose silent prompt explain &allow-other-keys))
          (eval `(defmethod ,quickload (systems &rest keys &key verbose silent prompt explain
                                        &allow-other-keys)
                   (declare (ignore keys prompt explain))
                   (stand-in-quickload systems :verbose verbose :silent silent))))
        (setf (fdefinition (ql-symbol "SYSTEM-APROPOS")) #'stand-in-system-apropos
              (fdefinition (ql-symbol "WHERE-IS-SYSTEM")) #'stand-in-where-is-system
              (fdefinition (ql-symbol "REGISTER-LOCAL-PROJECTS")) #'stand-in-register-local-projects)
        ql))))

(install-quicklisp-stand-in)
