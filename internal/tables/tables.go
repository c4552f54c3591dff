// Package tables reads the DynamoDB table definitions from template.yaml and creates
// them, so that tests and `terret dev` use exactly the schema that `sam deploy` creates.
package tables

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"gopkg.in/yaml.v3"
)

// Errors returned by this package.
var (
	ErrNoTables = errors.New("tables: template defines no AWS::DynamoDB::Table")
	ErrSchema   = errors.New("tables: unsupported table definition")
)

// Definition is one AWS::DynamoDB::Table resource of the template.
type Definition struct {
	LogicalID string
	Input     dynamodb.CreateTableInput // TableName is left empty
	TTLAttr   string                    // empty when the table has no TTL
}

type templateDoc struct {
	Resources map[string]struct {
		Type       string         `yaml:"Type"`
		Properties tableResources `yaml:"Properties"`
	} `yaml:"Resources"`
}

type keyElem struct {
	AttributeName string `yaml:"AttributeName"`
	KeyType       string `yaml:"KeyType"`
}

type index struct {
	IndexName  string    `yaml:"IndexName"`
	KeySchema  []keyElem `yaml:"KeySchema"`
	Projection struct {
		ProjectionType   string   `yaml:"ProjectionType"`
		NonKeyAttributes []string `yaml:"NonKeyAttributes"`
	} `yaml:"Projection"`
}

type tableResources struct {
	BillingMode          string `yaml:"BillingMode"`
	AttributeDefinitions []struct {
		AttributeName string `yaml:"AttributeName"`
		AttributeType string `yaml:"AttributeType"`
	} `yaml:"AttributeDefinitions"`
	KeySchema              []keyElem `yaml:"KeySchema"`
	GlobalSecondaryIndexes []index   `yaml:"GlobalSecondaryIndexes"`
	StreamSpecification    *struct {
		StreamViewType string `yaml:"StreamViewType"`
	} `yaml:"StreamSpecification"`
	TimeToLiveSpecification *struct {
		AttributeName string `yaml:"AttributeName"`
		Enabled       any    `yaml:"Enabled"`
	} `yaml:"TimeToLiveSpecification"`
}

// Parse returns the table definitions of a SAM/CloudFormation template, sorted by
// logical id. It returns ErrNoTables if there are none and ErrSchema for a definition
// it cannot reproduce faithfully (for example provisioned billing).
func Parse(template []byte) ([]Definition, error) {
	var doc templateDoc
	if err := yaml.Unmarshal(template, &doc); err != nil {
		return nil, fmt.Errorf("tables: parse template: %w", err)
	}
	var defs []Definition
	for id, r := range doc.Resources {
		if r.Type != "AWS::DynamoDB::Table" {
			continue
		}
		d, err := definition(id, r.Properties)
		if err != nil {
			return nil, err
		}
		defs = append(defs, d)
	}
	if len(defs) == 0 {
		return nil, ErrNoTables
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].LogicalID < defs[j].LogicalID })
	return defs, nil
}

func definition(id string, p tableResources) (Definition, error) {
	if p.BillingMode != "PAY_PER_REQUEST" {
		return Definition{}, fmt.Errorf("%w: %s: BillingMode %q, want PAY_PER_REQUEST", ErrSchema, id, p.BillingMode)
	}
	in := dynamodb.CreateTableInput{BillingMode: types.BillingModePayPerRequest}
	for _, a := range p.AttributeDefinitions {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{
			AttributeName: aws.String(a.AttributeName),
			AttributeType: types.ScalarAttributeType(a.AttributeType),
		})
	}
	in.KeySchema = keySchema(p.KeySchema)
	if len(in.KeySchema) == 0 {
		return Definition{}, fmt.Errorf("%w: %s: no KeySchema", ErrSchema, id)
	}
	for _, g := range p.GlobalSecondaryIndexes {
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName: aws.String(g.IndexName),
			KeySchema: keySchema(g.KeySchema),
			Projection: &types.Projection{
				ProjectionType:   types.ProjectionType(g.Projection.ProjectionType),
				NonKeyAttributes: g.Projection.NonKeyAttributes,
			},
		})
	}
	if s := p.StreamSpecification; s != nil {
		in.StreamSpecification = &types.StreamSpecification{
			StreamEnabled:  aws.Bool(true),
			StreamViewType: types.StreamViewType(s.StreamViewType),
		}
	}
	d := Definition{LogicalID: id, Input: in}
	if t := p.TimeToLiveSpecification; t != nil && fmt.Sprint(t.Enabled) == "true" {
		d.TTLAttr = t.AttributeName
	}
	return d, nil
}

func keySchema(ks []keyElem) []types.KeySchemaElement {
	var out []types.KeySchemaElement
	for _, k := range ks {
		out = append(out, types.KeySchemaElement{
			AttributeName: aws.String(k.AttributeName),
			KeyType:       types.KeyType(k.KeyType),
		})
	}
	return out
}

// API is the part of the DynamoDB client that Ensure uses.
type API interface {
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Names maps a template logical id (LogTable, ConnectionsTable, …) to a table name.
type Names map[string]string

// NamesWithPrefix names every table of defs prefix + logical id without the "Table"
// suffix, lower-cased: prefix "t1-" gives "t1-log", "t1-connections".
func NamesWithPrefix(defs []Definition, prefix string) Names {
	n := Names{}
	for _, d := range defs {
		n[d.LogicalID] = prefix + strings.ToLower(strings.TrimSuffix(d.LogicalID, "Table"))
	}
	return n
}

// Ensure creates every table of defs that does not exist yet under its name in names,
// waits until each is ACTIVE and enables TTL where the template does. Tables that exist
// are left as they are. It returns an error naming the table that could not be created.
func Ensure(ctx context.Context, api API, defs []Definition, names Names) error {
	for _, d := range defs {
		name := names[d.LogicalID]
		if name == "" {
			return fmt.Errorf("tables: no name for %s", d.LogicalID)
		}
		in := d.Input
		in.TableName = aws.String(name)
		_, err := api.CreateTable(ctx, &in)
		var inUse *types.ResourceInUseException
		switch {
		case errors.As(err, &inUse):
			continue
		case err != nil:
			return fmt.Errorf("tables: create %s: %w", name, err)
		}
		if err := waitActive(ctx, api, name); err != nil {
			return err
		}
		if d.TTLAttr != "" {
			_, err := api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
				TableName: aws.String(name),
				TimeToLiveSpecification: &types.TimeToLiveSpecification{
					AttributeName: aws.String(d.TTLAttr), Enabled: aws.Bool(true),
				},
			})
			if err != nil {
				return fmt.Errorf("tables: enable ttl on %s: %w", name, err)
			}
		}
	}
	return nil
}

func waitActive(ctx context.Context, api API, name string) error {
	for {
		out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("tables: describe %s: %w", name, err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tables: wait for %s: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
