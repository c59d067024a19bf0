-- TechEmpower's World and Fortune tables, as its test types' setup makes them: 10,000
-- worlds, each with a random number from 1 to 10,000, and the 12 fortunes. One
-- statement per paragraph (what runs them splits on a line that ends with `;`). Read by
-- examples/techempower.rs (`--setup`) and by the comparison rig's bench.
DROP TABLE IF EXISTS World;

CREATE TABLE World (
  id int NOT NULL,
  randomNumber int NOT NULL DEFAULT 0,
  PRIMARY KEY (id)
) ENGINE=InnoDB;

INSERT INTO World (id, randomNumber)
SELECT seq, 1 + floor(rand() * 10000) FROM seq_1_to_10000;

DROP TABLE IF EXISTS Fortune;

CREATE TABLE Fortune (
  id int NOT NULL,
  message varchar(2048) CHARACTER SET utf8mb4 NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB;

INSERT INTO Fortune (id, message) VALUES
(1, 'fortune: No such file or directory'),
(2, 'A computer scientist is someone who fixes things that aren''t broken.'),
(3, 'After enough decimal places, nobody gives a damn.'),
(4, 'A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1'),
(5, 'A computer program does what you tell it to do, not what you want it to do.'),
(6, 'Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen'),
(7, 'Any program that runs right is obsolete.'),
(8, 'A list is only as strong as its weakest link. — Donald Knuth'),
(9, 'Feature: A bug with seniority.'),
(10, 'Computers make very fast, very accurate mistakes.'),
(11, '<script>alert("This should not be displayed in a browser alert box.");</script>'),
(12, 'フレームワークのベンチマーク');
