;;;; project.lisp --- the session's project systems, findable by name.
;;;;
;;;; Every .asd under a project root the server registered is found by ASDF
;;;; through a system search function of ours (as Quicklisp's local-projects
;;;; does), not through the source-registry configuration: the user's own
;;;; configuration stays theirs, and neither ASDF:CLEAR-CONFIGURATION nor a
;;;; restart of the registry loses the project. The search comes first, so a
;;;; project's working copy wins over an installed system of the same name.

(in-package #:cl-mcp-server)

(eval-when (:compile-toplevel :load-toplevel :execute)
  (require "ASDF"))

(defvar *project-roots* '()
  "Directory namestrings of the registered project roots, newest first.")

(defvar *project-index* (make-hash-table :test 'equal)
  "Root namestring -> (scan-time directory-stamps . ((system-name . asd-pathname) ...)),
where directory-stamps are ((directory . write-date) ...) of the scan.")

(defvar *project-lock* (swank/backend:make-lock :name "cl-mcp project index"))

(defparameter *project-skipped-directories*
  '("target" "node_modules" "build" "_build" "dist" "CVS" "_darcs" "_sgbak")
  "Directory names never searched for .asd files (hidden ones neither).")

(defparameter *project-scan-limits* '(:depth 8 :directories 5000)
  "Bounds of one scan of a project tree, so a huge tree cannot stall a lookup.")

(defun skipped-directory-p (dir)
  (let ((name (car (last (pathname-directory dir)))))
    (or (not (stringp name))
        (zerop (length name))
        (char= (char name 0) #\.)
        (member name *project-skipped-directories* :test #'string=))))

(defun scan-project-tree (root)
  "The .asd files under ROOT as ((system-name . asd-pathname) ...), the
shallowest first (so a fixture's copy deeper down never shadows the real one);
second value, the write dates of the directories read."
  (let ((found '())
        (stamps '())
        (budget (getf *project-scan-limits* :directories))
        (queue (list (cons (uiop:ensure-directory-pathname root) 0))))
    (loop while (and queue (plusp budget))
          do (destructuring-bind (dir . depth) (pop queue)
               (decf budget)
               (push (cons dir (ignore-errors (file-write-date dir))) stamps)
               (dolist (file (ignore-errors (uiop:directory-files dir "*.asd")))
                 (push (cons (string-downcase (pathname-name file)) file) found))
               (when (< depth (getf *project-scan-limits* :depth))
                 (dolist (sub (ignore-errors (uiop:subdirectories dir)))
                   (unless (skipped-directory-p sub)
                     (setf queue (append queue (list (cons sub (1+ depth))))))))))
    (values (nreverse found) stamps)))

(defun stamps-current-p (stamps scanned-at)
  "Whether no directory of a scan made at SCANNED-AT changed since (a new or
removed file or subdirectory changes its directory's write date). Write dates
count whole seconds, so a directory written in the second of the scan or
later may have changed unseen: not current."
  (every (lambda (s)
           (let ((now (ignore-errors (file-write-date (car s)))))
             (and now (eql (cdr s) now) (< now scanned-at))))
         stamps))

(defun project-index (root &key force)
  "ROOT's index entries; with FORCE, rescanned when a directory changed."
  (swank/backend:call-with-lock-held
   *project-lock*
   (lambda ()
     (let ((entry (gethash root *project-index*)))
       (when (or (null entry)
                 (and force (not (stamps-current-p (second entry) (first entry)))))
         (let ((scanned-at (get-universal-time)))
           (multiple-value-bind (systems stamps) (scan-project-tree root)
             (setf entry (list* scanned-at stamps systems)
                   (gethash root *project-index*) entry))))
       (cddr entry)))))

(defun root-level-p (asd root)
  "Whether the file ASD is directly in the directory ROOT (a namestring)."
  (equal (pathname-directory asd)
         (pathname-directory (uiop:ensure-directory-pathname root))))

(defun find-project-asd (name &key (where :root))
  "The .asd defining the primary system NAME under a project root, or NIL.
WHERE :ROOT takes only a file directly in a root, :NESTED only a deeper one
(the shallowest first)."
  (flet ((lookup (force)
           (dolist (root *project-roots*)
             (dolist (entry (project-index root :force force))
               (let ((hit (cdr entry)))
                 (when (and (string= (car entry) name)
                            (eq (root-level-p hit root) (eq where :root))
                            (probe-file hit))
                   (return-from find-project-asd hit)))))))
    (or (lookup nil) (lookup t))))

(defun implementation-module-p (name)
  "Whether NAME (lower case) is the Lisp's own: ASDF, UIOP, or a module
REQUIRE provides (IMPLEMENTATION-CONTRIB-P, per implementation)."
  (or (member name '("asdf" "uiop" "asdf-package-system") :test #'string=)
      (implementation-contrib-p name)))

(defun project-system-search (name)
  "ASDF system search function, first of all: the .asd for NAME directly
in a project root. Never one of the implementation's own modules."
  (let ((name (asdf:primary-system-name (string-downcase (string name)))))
    (when (and *project-roots* (not (implementation-module-p name)))
      (find-project-asd name :where :root))))

(defun project-nested-system-search (name)
  "ASDF system search function, last of all: an .asd for NAME deeper in a
project tree. Such a file (vendored sources, a copy of the Lisp's own
sources) does not shadow a system ASDF finds elsewhere; load that .asd
explicitly (lisp-compile-file) to use it instead."
  (let ((name (asdf:primary-system-name (string-downcase (string name)))))
    (when (and *project-roots* (not (implementation-module-p name)))
      (find-project-asd name :where :nested))))

(defun install-project-search ()
  "Put the project's two search functions in place: the root's first, the
nested ones' last."
  (pushnew 'project-system-search asdf:*system-definition-search-functions*)
  (setf asdf:*system-definition-search-functions*
        (append (remove 'project-nested-system-search
                        asdf:*system-definition-search-functions*)
                (list 'project-nested-system-search))))

(defun asd-defined-names (asd)
  "The system names the DEFSYSTEM forms of the file ASD spell out, found by
their text (DEFINING-FORMS): nothing of the file is read or loaded. Lower
case."
  (let ((text (ignore-errors (uiop:read-file-string asd))))
    (and text
         (remove-duplicates (mapcar (lambda (form) (string-downcase (car form)))
                                    (defining-forms text '("defsystem")))
                            :test #'string= :from-end t))))

(defun project-system-names ()
  "Names of the systems defined by .asd files under the project roots: each
file's primary system and the secondary ones (NAME/...) it defines."
  (let ((names '()))
    (dolist (root *project-roots*)
      (dolist (e (project-index root :force t))
        (pushnew (car e) names :test #'string=)
        (dolist (n (asd-defined-names (cdr e)))
          (when (string= (asdf:primary-system-name n) (car e))
            (pushnew n names :test #'string=)))))
    (sort names #'string<)))

(defun register-project-root (root)
  "Makes every .asd under ROOT (a directory namestring) findable by name.
Returns (:root S :systems (S...))."
  (let ((root (namestring (uiop:ensure-directory-pathname root))))
    (swank/backend:call-with-lock-held
     *project-lock*
     (lambda ()
       (setf *project-roots* (cons root (remove root *project-roots* :test #'string=)))
       (remhash root *project-index*)))
    (install-project-search)
    (list :root root
          :systems (mapcar #'car (project-index root)))))

(install-project-search)
