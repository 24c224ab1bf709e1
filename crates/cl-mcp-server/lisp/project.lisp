;;;; project.lisp --- the session's project systems, found first by name.
;;;;
;;;; The server walks the project root (the walk clgrep-search makes:
;;;; .gitignore honoured, hidden and build folders skipped, bounded; see
;;;; src/tools/project_systems.rs) and hands over every .asd it found, with
;;;; the system names each file's DEFSYSTEM forms spell out. ASDF finds
;;;; those through a system search function of ours (as Quicklisp's
;;;; local-projects does), first of all, so a checkout or a vendored copy
;;;; under the root wins over an installed system of the same name; the
;;;; user's own configuration stays theirs, and neither
;;;; ASDF:CLEAR-CONFIGURATION nor a restart of the registry loses the
;;;; project. The implementation's own modules are never shadowed.

(in-package #:cl-mcp-server)

(eval-when (:compile-toplevel :load-toplevel :execute)
  (require "ASDF"))

(defvar *project-roots* '()
  "Directory namestrings of the registered project roots, newest first.")

(defvar *project-index* (make-hash-table :test 'equal)
  "Root namestring -> hash table: system name -> (ASD . OTHERS), the .asd
chosen for the name (the shallowest, then the first in path order) and the
other files under the root defining it too.")

(defvar *project-lock* (swank/backend:make-lock :name "cl-mcp project index"))

(defun implementation-module-p (name)
  "Whether NAME (lower case) is the Lisp's own: ASDF, UIOP, or a module
REQUIRE provides (IMPLEMENTATION-CONTRIB-P, per implementation); or Swank,
which serves the server itself (a SLIME checkout under the root must not
load over it)."
  (or (member name '("asdf" "uiop" "asdf-package-system" "swank") :test #'string=)
      (implementation-contrib-p name)))

(defun project-entry (name)
  "(ASD . OTHERS) for the system NAME (lower case) under the newest project
root defining it, or NIL."
  (dolist (root *project-roots*)
    (let* ((table (gethash root *project-index*))
           (entry (and table (gethash name table))))
      (when entry (return entry)))))

(defun project-system-search (name)
  "ASDF system search function, first of all: the project's .asd defining
NAME (or its primary system), when the file is still there."
  (let* ((name (string-downcase (string name)))
         (entry (or (project-entry name)
                    (project-entry (asdf:primary-system-name name)))))
    (when (and entry (probe-file (car entry)))
      (car entry))))

(defun install-project-search ()
  "Put the project's search function first (and the deeper-files-last one
of older helpers out)."
  (setf asdf:*system-definition-search-functions*
        (cons 'project-system-search
              (remove-if (lambda (f)
                           (member f '(project-system-search project-nested-system-search)))
                         asdf:*system-definition-search-functions*))))

(defun registered-source-file (name)
  "The .asd the registered system NAME was read from, or NIL. Read with
ASDF:REGISTERED-SYSTEM (ASDF >= 3.3), never with FIND-SYSTEM, which would
search and load."
  (let* ((fn (find-symbol "REGISTERED-SYSTEM" "ASDF"))
         (system (and fn (fboundp fn) (ignore-errors (funcall fn name)))))
    (and system (ignore-errors (asdf:system-source-file system)))))

(defun same-file-p (a b)
  (and a b (equal (ignore-errors (truename a)) (ignore-errors (truename b)))))

(defun forget-stale-systems (table)
  "Systems ASDF registered from another file than the one chosen in TABLE
are cleared, so the next lookup reads the chosen file: nothing keeps
the installed copy's definition (or its loaded state) once the checkout is
the project's."
  (maphash (lambda (name entry)
             (let ((source (registered-source-file name)))
               (when (and source (not (same-file-p source (car entry))))
                 (ignore-errors (asdf:clear-system name)))))
           table))

(defun register-project-root (root &key asd-files forget)
  "Makes the .asd files ASD-FILES, ((PATH NAME...) ...) the shallowest first,
findable by each NAME before any installed system, for the project ROOT
(a directory namestring). A name defined by several files is the first's;
names of the implementation's own modules are left out. FORGET, the root
this one replaces (a session moved), is no longer searched. Returns (:root
S :systems (S...))."
  (let ((root (namestring (uiop:ensure-directory-pathname root)))
        (forget (and forget (namestring (uiop:ensure-directory-pathname forget))))
        (table (make-hash-table :test 'equal))
        (names '()))
    (dolist (file asd-files)
      (let ((path (pathname (first file))))
        (dolist (name (rest file))
          (let ((name (string-downcase name)))
            (unless (implementation-module-p (asdf:primary-system-name name))
              (let ((entry (gethash name table)))
                (if entry
                    (unless (member path (cdr entry) :test #'equal)
                      (setf (cdr (last entry)) (list path)))
                    (progn (setf (gethash name table) (list path))
                           (push name names)))))))))
    (swank/backend:call-with-lock-held
     *project-lock*
     (lambda ()
       (when (and forget (string/= forget root))
         (setf *project-roots* (remove forget *project-roots* :test #'string=))
         (remhash forget *project-index*))
       (setf *project-roots* (cons root (remove root *project-roots* :test #'string=))
             (gethash root *project-index*) table)))
    (install-project-search)
    (forget-stale-systems table)
    (list :root root :systems (nreverse names))))

(defun project-system-names ()
  "Names of the systems defined by .asd files under the project roots."
  (let ((names '()))
    (dolist (root *project-roots*)
      (let ((table (gethash root *project-index*)))
        (when table
          (maphash (lambda (name entry) (declare (ignore entry))
                     (pushnew name names :test #'string=))
                   table))))
    (sort names #'string<)))

(defun system-origin (name)
  "Where the system NAME comes from: (:source-file P :project T-or-NIL
:also-defined-in (P...)), the other .asd files under the project root that
define it too (the chosen one is the shallowest); NIL when ASDF cannot
find it."
  (let* ((name (string-downcase (string name)))
         (system (ignore-errors (asdf:find-system name nil)))
         (source (and system (ignore-errors (asdf:system-source-file system))))
         (entry (project-entry name)))
    (when source
      (list :source-file (namestring source)
            :project (and entry (same-file-p source (car entry)) t)
            :also-defined-in (and entry (mapcar #'namestring (cdr entry)))))))

(install-project-search)
