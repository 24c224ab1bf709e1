;;;; names.lisp --- answering a wrong guess briefly: the few nearest names
;;;; and how many more there are, never the whole list. Every "no such
;;;; test, system, package or symbol" message of the helpers ends with
;;;; NAME-GUESS-CLAUSE.

(in-package #:cl-mcp-server)

(defparameter *nearest-names-shown* 5
  "At most this many nearest names follow an unknown name.")

(defun edit-distance (a b)
  "The Levenshtein distance between the strings A and B, any case."
  (let ((row (make-array (1+ (length b)))))
    (dotimes (j (1+ (length b))) (setf (aref row j) j))
    (dotimes (i (length a))
      (let ((diagonal (aref row 0)))
        (setf (aref row 0) (1+ i))
        (dotimes (j (length b))
          (let ((above (aref row (1+ j))))
            (setf (aref row (1+ j))
                  (min (1+ above) (1+ (aref row j))
                       (+ diagonal (if (char-equal (char a i) (char b j)) 0 1))))
            (setf diagonal above)))))
    (aref row (length b))))

(defun candidate-text (name)
  "NAME as shown: a symbol qualified (pkg::name), a string as it is."
  (if (symbolp name) (qualified-name name) (string name)))

(defun candidate-key (name)
  "The part of NAME compared with a guess: a symbol's name, a string's
unqualified part."
  (if (symbolp name) (symbol-name name) (unqualified (string name))))

(defun nearest-names (designator names &key (limit *nearest-names-shown*))
  "The members of NAMES (symbols or strings) nearest to the string
DESIGNATOR (its name part, when qualified) by edit distance, at most LIMIT,
the nearest first; only those within a third of the longer name (at least
2 edits), or holding DESIGNATOR."
  (let* ((wanted (unqualified designator))
         (scored (loop for name in names
                       for candidate = (candidate-key name)
                       for distance = (edit-distance wanted candidate)
                       when (or (<= distance (max 2 (floor (max (length wanted)
                                                                (length candidate))
                                                           3)))
                                (and (>= (length wanted) 3)
                                     (search wanted candidate :test #'char-equal)))
                         collect (cons distance name))))
    ;; SORT is destructive: only its value is the list (SCORED may now be
    ;; a cell inside it, as on ECL).
    (let ((sorted (stable-sort (sort scored #'string< :key (lambda (x) (candidate-text (cdr x))))
                               #'< :key #'car)))
      (mapcar #'cdr (subseq sorted 0 (min limit (length sorted)))))))

(defun name-guess-clause (designator names &key (kind "names"))
  "The end of an unknown-name message: \" Did you mean A, B? (KIND: N known,
M more not listed.)\", or \" (KIND: N known, none close to \"x\".)\" (when
no more than five are known and none is close, all of them).
NAMES are the known ones (symbols or strings), KIND what they are
(\"tests\", \"systems\"); at most *NEAREST-NAMES-SHOWN* are named."
  (let* ((names (remove-duplicates names :test #'equal :key #'candidate-text))
         (nearest (nearest-names designator names))
         (total (length names)))
    (cond ((zerop total) "")
          (nearest
           (format nil " Did you mean ~{~A~^, ~}? (~A: ~D known~[~:;, ~:*~D more not listed~].)"
                   (mapcar #'candidate-text nearest) kind total
                   (- total (length nearest))))
          ;; So few that naming them all is as short.
          ((<= total *nearest-names-shown*)
           (format nil " (~A: ~D known: ~{~A~^, ~}.)" kind total
                   (sort (mapcar #'candidate-text names) #'string<)))
          (t (format nil " (~A: ~D known, none close to ~S.)" kind total designator)))))

(eval-when (:compile-toplevel :load-toplevel :execute)
  (require "ASDF"))

(defun known-system-names ()
  "The names of the systems ASDF knows or can find: those registered, the
source registry's and the registered project roots' (project.lisp)."
  (let ((names (copy-list (asdf:registered-systems))))
    (ignore-errors
     (asdf:ensure-source-registry)
     (let ((table (symbol-value (find-symbol "*SOURCE-REGISTRY*"
                                             (or (find-package "ASDF/SOURCE-REGISTRY")
                                                 (find-package "ASDF"))))))
       (when (hash-table-p table)
         (maphash (lambda (k v) (declare (ignore v)) (push (string k) names)) table))))
    (ignore-errors
     (let ((index (symbol-value (find-symbol "*PROJECT-INDEX*" "CL-MCP-SERVER"))))
       (maphash (lambda (root entry)
                  (declare (ignore root))
                  (dolist (pair (cddr entry))
                    (when (and (consp pair) (stringp (car pair)))
                      (push (car pair) names))))
                index)))
    (remove-duplicates names :test #'string-equal)))

(defun system-guess-clause (name)
  (name-guess-clause name (known-system-names) :kind "systems"))

(defun package-guess-clause (name)
  (name-guess-clause name
                     (loop for p in (list-all-packages)
                           append (cons (package-name p) (package-nicknames p)))
                     :kind "packages"))

(defun symbol-guess-clause (name package)
  "The nearest of the symbols PACKAGE holds itself (its own, not those it
inherits from COMMON-LISP and other used packages, unless it has none)."
  (let ((own '()) (all '()))
    (do-symbols (s package)
      (push s all)
      (when (eq (symbol-package s) package) (push s own)))
    (name-guess-clause name (or own all)
                       :kind (format nil "symbols of ~A" (package-name package)))))
