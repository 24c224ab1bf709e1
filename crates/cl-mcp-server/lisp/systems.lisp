;;;; systems.lisp --- listing and describing ASDF systems, source
;;;; directories, name completion.

(in-package #:cl-mcp-server)

(eval-when (:compile-toplevel :load-toplevel :execute)
  (require "ASDF"))

;;; Listing and describing systems.

;; ASDF >= 3.3 has REGISTERED-SYSTEM; older ones (ECL's bundled ASDF) do
;; not, and FIND-SYSTEM with ERROR-P NIL is the next best lookup.
(defun registered-system* (name)
  (let ((fn (find-symbol "REGISTERED-SYSTEM" "ASDF")))
    (if (and fn (fboundp fn))
        (funcall fn name)
        (asdf:find-system name nil))))

(defun findable-system-names ()
  "Names of systems ASDF can find: registered ones and those its source
registry knows."
  (let ((names (mapcar #'string-downcase (asdf:registered-systems))))
    (ignore-errors
     (asdf:ensure-source-registry)
     (let ((registry-symbol (find-symbol "*SOURCE-REGISTRY*" "ASDF/SOURCE-REGISTRY")))
       (when (and registry-symbol (boundp registry-symbol)
                  (hash-table-p (symbol-value registry-symbol)))
         (maphash (lambda (k v) (declare (ignore v)) (push (string-downcase k) names))
                  (symbol-value registry-symbol)))))
    (sort (remove-duplicates names :test #'string=) #'string<)))

(defun list-systems (&key filter loaded-only (limit 500))
  "Systems ASDF knows: (:count N :systems ((:name S :loaded T-or-NIL
:project T-or-NIL)...)), the project's own first, at most LIMIT entries;
FILTER keeps names containing it (any case)."
  (let* ((project (project-system-names))
         (names (append project
                        (remove-if (lambda (n) (member n project :test #'string=))
                                   (findable-system-names))))
         (names (if filter
                    (remove-if-not (lambda (n) (search filter n :test #'char-equal)) names)
                    names))
         (entries (loop for n in names
                        for loaded = (ignore-errors (let ((s (registered-system* n)))
                                                      (and s (asdf:component-loaded-p s) t)))
                        when (or loaded (not loaded-only))
                          collect (list :name n :loaded loaded
                                        :project (and (member n project :test #'string=) t)))))
    (list :count (length entries)
          :systems (subseq entries 0 (min limit (length entries))))))

(defun dependency-string (dep)
  (if (stringp dep)
      dep
      (let ((*print-case* :downcase)) (prin1-to-string* dep))))

(defun system-info (name)
  "Facts about the ASDF system NAME: (:name S :version S :description S
:long-description S :author S :maintainer S :license S :homepage S
:depends-on (S...) :defsystem-depends-on (S...) :source-file P
:source-directory P :loaded T-or-NIL :project T-or-NIL :also-defined-in (P...)),
or (:error MESSAGE). :project: the source file is the one chosen under the
project root; :also-defined-in: the other .asd files there defining it."
  (let* ((name (string-downcase (string name)))
         (system (handler-case (asdf:find-system name nil)
                   (error (e)
                     (return-from system-info
                       (list :error (format nil "Could not read system ~A: ~A"
                                            name (princ-to-string* e))))))))
    (if (null system)
        (list :error (format nil "ASDF cannot find a system named ~S.~A Check the source registry or load its .asd file." name (system-guess-clause name)))
        (let ((origin (system-origin name)))
         (flet ((text (x) (and x (princ-to-string* x))))
          (list :name (asdf:component-name system)
                :version (text (asdf:component-version system))
                :description (text (asdf:system-description system))
                :long-description (and (asdf:system-long-description system)
                                       (truncate-string (text (asdf:system-long-description system)) 5000))
                :author (text (asdf:system-author system))
                :maintainer (text (asdf:system-maintainer system))
                :license (text (asdf:system-licence system))
                :homepage (text (ignore-errors (asdf:system-homepage system)))
                :depends-on (mapcar #'dependency-string (asdf:system-depends-on system))
                :defsystem-depends-on (mapcar #'dependency-string
                                              (asdf:system-defsystem-depends-on system))
                :source-file (text (asdf:system-source-file system))
                :source-directory (text (asdf:system-source-directory system))
                :loaded (and (asdf:component-loaded-p system) t)
                :project (getf origin :project)
                :also-defined-in (getf origin :also-defined-in)))))))

(defun implementation-source-directories ()
  "Where the Lisp's own sources are, when installed (the SYS logical host's
SRC; and CONTRIB;), and Swank's when SWANK-LOADER loaded it rather than
ASDF: code-find answers paths there."
  (let ((swank (let ((s (and (find-package "SWANK-LOADER")
                             (find-symbol "*SOURCE-DIRECTORY*" "SWANK-LOADER"))))
                 (and s (boundp s) (symbol-value s)))))
    (append
     (loop for logical in '("SYS:SRC;" "SYS:CONTRIB;")
           for dir = (ignore-errors (probe-file (translate-logical-pathname logical)))
           when dir collect (namestring dir))
     (let ((dir (and swank (ignore-errors (probe-file swank)))))
       (when dir (list (namestring dir)))))))

(defun source-directories ()
  "The source directories of the ASDF systems the image has registered and
of the Lisp itself: (:directories (PATH...)). File tools may read there
(code-find points into them)."
  (list :directories
        (remove-duplicates
         (append
          (implementation-source-directories)
          (loop for name in (asdf:registered-systems)
                for dir = (ignore-errors (asdf:system-source-directory name))
                when dir collect (namestring dir)))
         :test #'string=)))

(defun complete-names (kind prefix &key package (limit 100))
  "Names of KIND (\"package\", \"symbol\" or \"system\") starting with
PREFIX (any case), sorted: (:values (S...) :total N). Symbols are those
accessible in PACKAGE (default CL-USER); system names come from ASDF."
  (let* ((prefix (or prefix ""))
         (names
           (cond
             ((string-equal kind "package")
              (loop for p in (list-all-packages)
                    append (cons (package-name p) (package-nicknames p))))
             ((string-equal kind "symbol")
              (multiple-value-bind (pkg err) (resolve-package (or package "CL-USER"))
                (when err (return-from complete-names (list :error err)))
                (let ((acc '()))
                  (do-symbols (s pkg) (push (symbol-name s) acc))
                  acc)))
             ((string-equal kind "system") (findable-system-names))
             (t (return-from complete-names
                  (list :error (format nil "Unknown kind ~S." kind))))))
         (matching (sort (remove-duplicates
                          (remove-if-not (lambda (n)
                                           (and (>= (length n) (length prefix))
                                                (string-equal prefix n :end2 (length prefix))))
                                         names)
                          :test #'string=)
                         #'string<)))
    (list :values (subseq matching 0 (min limit (length matching)))
          :total (length matching))))
